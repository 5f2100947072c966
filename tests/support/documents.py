"""A result document checked against the published schema: valid, and no key the schema does
not declare (shared by the schema test and the multi-process runs that write documents)."""
import json
from pathlib import Path

from microbench.store import schema

DEFINITION = {schema.RESULT: "result", schema.SWEEP: "sweep", schema.OP_BENCH: "op_bench",
              schema.OLDER_TOOL: "older_tool_result"}

def _resolve(subschema: dict) -> dict:
    while "$ref" in subschema:
        subschema = schema.schema()["$defs"][subschema["$ref"].rsplit("/", 1)[1]]
    return subschema


def undeclared_keys(document, subschema, path="$"):
    """Keys of the document that the schema does not name where it lists an object's keys."""
    subschema = _resolve(subschema)
    if isinstance(document, dict):
        properties = subschema.get("properties")
        extra = subschema.get("additionalProperties")
        for key, value in document.items():
            if properties is not None and key in properties:
                yield from undeclared_keys(value, properties[key], f"{path}.{key}")
            elif properties is not None:
                yield f"{path}.{key}"
            elif isinstance(extra, dict):
                yield from undeclared_keys(value, extra, f"{path}.{key}")
    elif isinstance(document, list) and "items" in subschema:
        for index, item in enumerate(document):
            yield from undeclared_keys(item, subschema["items"], f"{path}[{index}]")


def check_document(path: Path) -> dict:
    document = json.loads(path.read_text())
    schema.validate_result(document, str(path))
    kind = schema.document_kind(document)
    definition = {"$ref": f"#/$defs/{DEFINITION[kind]}"}
    missing = list(undeclared_keys(document, definition))
    assert not missing, f"{path.name}: keys the schema does not declare: {missing[:10]}"
    return document
