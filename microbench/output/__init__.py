"""What one run writes; writers read only a :class:`~microbench.output.summary.Summary` (or
sweep rows' stored results) and compute nothing.

* :mod:`.summary` -- the finished run: every derived figure from its trials, on one basis;
* :mod:`.console` -- config echo, warm-up, per-iteration lines and the summary on the terminal;
* :mod:`.files`   -- the JSON result and the CSV row, written whole or not at all
  (through :mod:`microbench.platform.writing`);
* :mod:`.compare` -- ``--compare`` (exit 5 on a regression) and ``--scaling-baseline``;
* :mod:`.chart` -- the one chart stack (the only module importing matplotlib) and the report's
  chart; :mod:`.sweep_plot` -- a sweep's ``--plot``, drawn with it;
* :mod:`.table` -- the report's tables of stored results (text, markdown, CSV, JSON);
  :mod:`.sweep_table` -- a sweep's closing tables, from its rows' stored results.

Every figure's CSV column, report column, ``--compare`` line and chart come from the registry,
:mod:`microbench.store.figures`.
"""
