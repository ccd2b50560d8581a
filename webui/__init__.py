"""The llm-planner web UI (`streamlit run app.py`): a package with one module per section over `planner.ui_data`.

  state.py      defaults, the shared link (query string), the sidebar
  common.py     inputs/context, cached calls, formatting, Markdown escaping, help lines, the table helper
  headline.py   the first screen: verdicts, numbers, smallest setup that fits, the device comparison
  sections/     memory, plan (capacity plan), batching, context, roofline, quantization, validation, accuracy,
                export
  main.py       page layout and the section tabs
"""
