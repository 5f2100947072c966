"""The report's chart (issue 56): no text outside the canvas at any panel count, and each
panel's x axis a setting that varies inside it, else a bar per row."""
import pytest

from microbench.output import chart, table
from microbench.store import collection
from microbench.store.entry import Entry
from support.canvas import texts_outside

UNITS = ("images/s", "tokens/s", "samples/s")
LONG = "AMD Instinct MI300X VF with a long marketing name " * 2


def _entry(number: int, unit: str, **settings) -> Entry:
    return Entry("model", f"r{number}.json", settings,
                 {"throughput": 10.0 + number, "ci95_low": 9.0, "ci95_high": 12.0 + number,
                  "trial_count": 3}, unit, identity=str(number))


def _chart(entries):
    return chart.build_figure(table.build_tables(collection.group_entries(entries))[0],
                              "throughput")


def _panel_entries(panels: int) -> list[Entry]:
    """Two rows a unit, each unit's rows sharing a long network and device of their own, so
    that every panel has a title of several lines and a legend."""
    return [_entry(10 * number + row, unit, network=f"net-{unit}-{LONG}"[:90],
                   device=f"{LONG} {unit}", batch=2 ** row, precision=precision)
            for number, unit in enumerate(UNITS[:panels]) for row in (1, 2)
            for precision in ("fp32", "amp-bf16")]


@pytest.mark.parametrize("panels", [1, 2, 3])
def test_every_text_lies_inside_the_canvas_at_any_panel_count(panels):
    figure = _chart(_panel_entries(panels))
    assert len(figure.axes) == panels
    assert texts_outside(figure) == []


def test_a_panel_is_drawn_across_the_setting_that_varies_inside_it():
    """Quantized generation beside an image sweep: the tokens/s rows share one batch, so
    their axis is quantize, not the batch that splits the whole table (issue 56)."""
    images = [_entry(n, "images/s", network="resnet18", batch=batch, quantize=None)
              for n, batch in enumerate((2, 4))]
    tokens = [_entry(5 + n, "tokens/s", network="llama_tiny", batch=1, quantize=name)
              for n, name in enumerate(("none", "int8wo", "int4wo"))]
    axes = {axis.get_ylabel(): axis for axis in _chart(images + tokens).axes}
    assert axes["throughput [images/s]"].get_xlabel() == "batch"
    quantized = axes["throughput [tokens/s]"]
    assert quantized.get_xlabel() == "quantize"
    assert sorted(label.get_text() for label in quantized.get_xticklabels()) == [
        "int4wo", "int8wo", "none"]


def test_a_panel_whose_rows_share_every_setting_gets_a_bar_per_row():
    images = [_entry(n, "images/s", network="resnet18", batch=batch) for n, batch in
              enumerate((2, 4))]
    tokens = [_entry(5 + n, "tokens/s", network="llama_tiny", batch=1) for n in range(2)]
    axes = {axis.get_ylabel(): axis for axis in _chart(images + tokens).axes}
    rows = axes["throughput [tokens/s]"]
    assert rows.get_xlabel() == "row"
    labels = [label.get_text() for label in rows.get_xticklabels()]
    assert len(labels) == 2 and all(label.startswith("#") for label in labels)
