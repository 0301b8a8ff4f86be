"""The pictures' and widgets' text in Traditional Chinese (Taiwan): one module per view, each a ``MESSAGES``
dict (English template -> zh-TW template, the same ``{fields}``), and :mod:`.figures` for the chapters' own
matplotlib figures, whose text the notebooks write in English and :mod:`pagedkv_edu.viz.figure_text`
translates when the figure is shown.
"""
