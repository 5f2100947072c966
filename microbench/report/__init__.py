"""``microbench-report``: many stored results read back, grouped and compared (:mod:`.command`).

The results are found, read and modelled by :mod:`microbench.store` (``collection``, ``entry``);
here they are laid out:

* :mod:`microbench.output.table` -- the text, markdown, CSV and JSON table of a collection;
* :mod:`microbench.output.chart` -- its chart (matplotlib); :mod:`.page` -- the HTML page.
"""
