"""Print a digest of the grader package's Python files (standard library only).

docker/build-images.sh labels the runner image with it (gpugrade.source), so the docker-sandbox
tests can tell an image built from other grader sources and rebuild it.
"""

import hashlib
import sys
from pathlib import Path

root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "grader")
digest = hashlib.sha256()
for path in sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts):
    digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
print(digest.hexdigest()[:16])
