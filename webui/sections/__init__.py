"""One module per section of the page; each exposes `render(ctx)`. The order of SECTIONS in webui/state.py is the
order of the tabs."""
