"""What every layer reads and writes: atomic file I/O, the data-only caches, the build
folder's layout and artifact catalogue, and the readers that check artifacts on load.
Imports nothing above the ground level (config, files, diagnostics)."""
