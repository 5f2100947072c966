"""Writers that read only a :class:`~microbench.summary.Summary` (or sweep rows of them).

* :mod:`.console` -- config echo, warm-up, per-iteration lines and the summary on the terminal;
* :mod:`.files`   -- the JSON result and the CSV row, written whole or not at all;
* :mod:`.compare` -- ``--compare`` (exit 5 on a regression) and ``--scaling-baseline``;
* :mod:`.plot`    -- ``--plot`` for sweeps (matplotlib).
"""
