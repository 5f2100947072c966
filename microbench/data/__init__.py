"""A real input pipeline (issue 25): is the GPU waiting for data?

Beside the synthetic inputs that already sit on the device (``--data synthetic``, not this
package), a run can read images through a ``torch.utils.data.DataLoader``: a generated set made
once into a cache (``--data loader``) or the user's own tree (``--data folder``), decoded with
torchvision.io on the host or the GPU, cropped, flipped and normalised with transforms.v2 in the
workers or after the copy, and fed to the model step by step. Language models get a generated
token corpus (int32 ids, memory-mapped) through the same loader and the same figures.

It measures how long each step waited for its batch, the loader alone, and the workers' CPU, and
turns them, with the model-alone throughput of the same invocation, into a verdict: input-bound
or compute-bound, and by how much.

Modules, one concern each:

* ``settings``   ModelInput (what the model takes); DataSettings (the flags' values) is
  settings/data_settings.py's, re-exported here
* ``image_files`` an image's bound and format (read through platform/inputs.py)
* ``codecs``     the one place that calls an image codec (torchvision.io)
* ``cache``      generated sets made once, whole or not at all, safe under concurrent ranks
* ``folder``     the user's tree scanned and checked before the run
* ``datasets``   what a worker runs; the Batch type and its collate
* ``transforms`` transforms.v2 on the host, and the device stage after the copy
* ``loader``     the DataLoader of one rank's shard, endless batches, the copy to the device
* measure/input_bound.py (a layer below): WaitTimes, worker CPU, loader/pipeline runs, the
  verdict and the data block, re-exported here
* ``pipeline``   open_pipeline: checks, source, loader; loader-alone; the fed step

Example::

    from microbench.data import DataSettings, ModelInput, open_pipeline, report

    settings = DataSettings(source="loader", workers=8, transforms="gpu")
    with open_pipeline(settings, ModelInput.of(spec.model, torch.float32, True, True),
                       batch_size=256, device=torch.device("cuda")) as pipeline:
        loader_run = pipeline.loader_alone(batches=50)
        fed = pipeline.feeding(work.step, work.inputs, target)
        ...                                   # warm up, fed.start(n), time n steps, fed.stop()
        data = report(pipeline.description(), fed.result(per_s), loader_run, model_per_s,
                      pipeline.skipped(), pipeline.unit)
    print("\\n".join(data.lines()))
"""
from microbench.measure.input_bound import (CpuUse, DataReport, DataTrial, LoaderRun, ModelAloneRun,
                                            PipelineRun, Verdict, WaitTimes, combine, report,
                                            verdict)
from microbench.data.pipeline import FedStep, Pipeline, open_pipeline
from microbench.data.settings import ModelInput
from microbench.settings.data_settings import DataSettings

__all__ = ["CpuUse", "DataReport", "DataSettings", "DataTrial", "FedStep", "LoaderRun",
           "ModelAloneRun", "ModelInput", "Pipeline", "PipelineRun", "Verdict", "WaitTimes",
           "combine", "open_pipeline", "report", "verdict"]
