"""The viewer's stylesheet, shared by the report page and the Jupyter fragments.

Every rule is scoped under ``.ors-view`` so that a fragment embedded in a
notebook styles only itself.
"""

from __future__ import annotations

__all__ = ["STYLE"]

STYLE = """
.ors-view{font:14px/1.4 system-ui,sans-serif;color:#222;max-width:1100px;margin:0 auto}
.ors-view table.summary{border-collapse:collapse;margin:8px 0}
.ors-view table.summary td,.ors-view table.summary th{border:1px solid #ccc;padding:3px 8px;
 text-align:left}
.ors-view .episode{border:1px solid #bbb;border-radius:6px;margin:10px 0;padding:6px 10px}
.ors-view .episode.hidden{display:none}
.ors-view .ep-head{display:flex;gap:16px;flex-wrap:wrap;align-items:baseline}
.ors-view .ep-head .title{font-weight:600}
.ors-view .msg{border-left:4px solid #ccc;margin:6px 0;padding:2px 8px;background:#fafafa}
.ors-view .msg.user{border-color:#4a7}.ors-view .msg.assistant{border-color:#47c}
.ors-view .msg.call{border-color:#a6c}.ors-view .msg.result{border-color:#999}
.ors-view .msg.failed,.ors-view .msg.bad{border-color:#c44}
.ors-view .msg.reasoning{border-color:#cb4;font-style:italic}
.ors-view .role{font-size:12px;color:#555}
.ors-view pre{white-space:pre-wrap;word-break:break-word;margin:2px 0;font:13px/1.35 monospace}
.ors-view .bad{color:#b22}.ors-view .dim,.ors-view .note{color:#777}
.ors-view .step{margin:8px 0 8px 8px}.ors-view .step-head{font-size:12px;color:#333}
.ors-view img.frame{max-width:240px;image-rendering:pixelated;border:1px solid #ccc;margin:2px}
.ors-view .final{margin-top:6px;font-weight:600}
.ors-view .controls{margin:8px 0;display:flex;gap:8px;align-items:center}
.ors-view .tools td,.ors-view .tools th{border:1px solid #ccc;padding:3px 8px;
 vertical-align:top;text-align:left}
.ors-view .tools{border-collapse:collapse}
"""
