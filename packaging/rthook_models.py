# PyInstaller runtime hook: runs in the bundle before any of our code.
# The bundle carries the embedding model in <bundle>/_internal/models; point the engine at it
# unless the user chose a models folder ($MEMORY_STUDIO_MODELS, see core/embedding/provision.py).
import os
import sys

os.environ.setdefault("MEMORY_STUDIO_MODELS", os.path.join(sys._MEIPASS, "models"))
