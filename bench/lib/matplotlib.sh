# Sourced by bench scripts that draw plots: installs matplotlib (for bench/*-plot.py) when the
# Python that runs them lacks it.
python3 -c 'import matplotlib' 2>/dev/null ||
  python3 -m pip install --quiet --root-user-action=ignore "matplotlib>=3.7,<4" >&2
