"""Strings that are markup somewhere (HTML, markdown, a table), for the tests that every string from outside is
shown as text (issue 26). Each one that ran would set ``document.title`` to "X".

    from payloads import PAYLOADS, IMG        # PAYLOADS: every kind; the names below: what a file name can hold
"""

IMG = """<img src=x onerror="document.title='X'">"""
SCRIPT = "<script>document.title='X'</script>"
HOVER = "<b onmouseover=alert(1)>b</b>"
JS_LINK = "[x](javascript:document.title='X')"
DATA_IMG = "![x](data:text/html,<script>document.title='X'</script>)"
TABLE = "a|b`c\nd"
CLOSE = "</td></tr></table>"
PAYLOADS = [IMG, SCRIPT, HOVER, JS_LINK, DATA_IMG, TABLE, CLOSE]
"""Every kind: HTML that runs, a script link, a data: image, a table's `|`, a backtick and a line break, and
HTML that closes a table. Below: the ones a file name or a language code can hold (no '/', no line break)."""
MODEL_A, MODEL_B = IMG, "[x](javascript:document.title='X') |`b"
LANG_HIGH, LANG_LOW = IMG, "[x](javascript:document.title='X')|`"
DATASET = "<b onmouseover=alert(1)>pairs.json"
OUT = f"{IMG} run"
HOSTILE_FILE = "javascript:document.title='X'.csv"
"""A file a plugin leaves in its folder: the page links to it, and the link must stay a relative one."""
