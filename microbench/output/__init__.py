"""What one run writes; writers read only a :class:`~microbench.measure.summary.Summary` (or
sweep rows of them) and compute nothing.

* :mod:`.console` -- config echo, warm-up, per-iteration lines and the summary on the terminal;
* :mod:`.files`   -- the JSON result and the CSV row, written whole or not at all
  (through :mod:`.writing`);
* :mod:`.compare` -- ``--compare`` (exit 5 on a regression) and ``--scaling-baseline``;
* :mod:`.chart` -- the one chart stack (the only module importing matplotlib) and the report's
  chart; :mod:`.sweep_plot` -- a sweep's ``--plot``, drawn with it;
* :mod:`.table` -- the report's tables of stored results (text, markdown, CSV, JSON);
* :mod:`.text_table`, :mod:`.progress`, :mod:`.units` -- console tables, the live line, units.
"""
