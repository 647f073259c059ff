"""Shared test set-up: keep brrr's caches inside the checkout, as the Makefile does."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

os.environ.setdefault("BRRR_CACHE_DIR", str(ROOT / ".cache" / "brrr"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(ROOT / ".cache" / "inductor"))
