"""llm-planner web UI: `streamlit run app.py`.

A thin entry point: the page lives in the `webui` package (one module per section, over `planner.ui_data`).
"""

from webui.main import main

main()
