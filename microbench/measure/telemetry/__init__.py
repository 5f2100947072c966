"""GPU telemetry over the timed region: clocks, power, temperature, utilization, throttling, energy.

A source reads one :class:`Sample` from the vendor's management library: NVML (``pynvml``, from
the PyPI package nvidia-ml-py) on NVIDIA, amdsmi (ROCm's Python library) on AMD Instinct. A
:class:`Sampler` thread reads the source every ``interval_s`` while the benchmark times its loop,
and :func:`summarize` turns the samples into a :class:`TelemetryReport`. Telemetry never stops a
run: a missing library or a failing init gives a one-line note and no source; the CPU is
"unavailable", never guessed. Any field the device does not expose is ``None``.

The package, one concern a module:

- ``sampler``   :class:`Sample` (one reading), the :class:`Source` protocol, and
                :class:`Sampler`, the thread that samples during the timed region
- ``library``   what the NVML and amdsmi sources share (import, a field query, coercion) and
                finding torch's GPU among the library's (UUID, PCI address, *_VISIBLE_DEVICES)
- ``nvidia``    :class:`NvmlSource` and NVML's throttle reasons
- ``amd``       :class:`AmdSmiSource` and amdsmi's fields and throttle flags
- ``opening``   :func:`open_source`: the source for a torch device, or a note saying why none
- ``report``    :class:`TelemetryReport`: min / median / max per quantity, the SM clock's drop,
                energy by counter or power x time labelled estimated, per item

Example::

    source, note = open_source(device)
    print(note)
    sampler = Sampler(source) if source else None
    if sampler:
        sampler.start()                 # just before the first timed step
    run_timed_loop()                    # ends with a device synchronisation
    if sampler:
        report = summarize(sampler.stop(), source, items=images, timed_s=seconds)
        source.close()
    else:
        report = TelemetryReport.unavailable(note)
    for line in report.warnings():
        print(line)
    result["telemetry"] = report.to_dict()
"""
from microbench.measure.telemetry.amd import (AMD_THROTTLE_BIT_GROUPS, AMD_VIOLATION_REASONS,
                                              AMDSMI_MISSING, AmdSmiSource,
                                              decode_amd_throttle_bits)
from microbench.measure.telemetry.nvidia import (NVML_MISSING, NVML_NOT_THROTTLING,
                                                 NVML_THROTTLE_REASONS, NvmlSource,
                                                 decode_nvml_reasons)
from microbench.measure.telemetry.opening import open_source
from microbench.measure.telemetry.report import (ENERGY_COUNTER, ENERGY_TRAPEZOID,
                                                 SM_CLOCK_DROP_WARN, Stat, TelemetryReport,
                                                 combine, counter_energy_j,
                                                 energy_counter_vs_power, power_energy_j,
                                                 summarize)
from microbench.measure.telemetry.sampler import (DEFAULT_INTERVAL_S, QUANTITIES, Sample,
                                                  Sampler, Source)

__all__ = [
    "AMDSMI_MISSING", "AMD_THROTTLE_BIT_GROUPS", "AMD_VIOLATION_REASONS", "DEFAULT_INTERVAL_S",
    "ENERGY_COUNTER", "ENERGY_TRAPEZOID", "NVML_MISSING", "NVML_NOT_THROTTLING",
    "NVML_THROTTLE_REASONS", "QUANTITIES", "SM_CLOCK_DROP_WARN", "AmdSmiSource", "NvmlSource",
    "Sample", "Sampler", "Source", "Stat", "TelemetryReport", "combine", "counter_energy_j",
    "decode_amd_throttle_bits", "decode_nvml_reasons", "energy_counter_vs_power", "open_source",
    "power_energy_j", "summarize",
]
