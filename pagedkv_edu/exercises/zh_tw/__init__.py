"""The graders' lines in Traditional Chinese (Taiwan): one module per grader module, each a ``MESSAGES`` dict.

A key is the English template exactly as the grader writes it in ``tr(...)``, ``{fields}`` included; the
value is its translation with the same fields. ``tests/test_grader_messages.py`` fails on a template with
no translation, a translation no grader uses, a field, number or inline code span that differs, or a
glossary term (``book/glossary.md``) not rendered by its one zh-TW term.
"""
