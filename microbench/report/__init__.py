"""``microbench-report``: many stored results read back, grouped and compared (:mod:`.command`).

* :mod:`.collection` -- result files found and read (schema-checked) into entries;
* :mod:`.entry`      -- one stored result as a row of settings and figures;
* :mod:`.table`      -- the text, CSV and JSON table of a collection;
* :mod:`.chart`      -- its chart (matplotlib); :mod:`.page` -- the HTML page.
"""
