"""``microbench-report``: many stored results read back, grouped and compared (:mod:`.command`).

The results are found, read and modelled by :mod:`microbench.store` (``collection``, ``entry``)
and laid out by :mod:`microbench.output` (``table``: the text, markdown, CSV and JSON table of a
collection; ``chart``: its chart, matplotlib). Here: :mod:`.command` wires them, :mod:`.page`
writes the HTML page.
"""
