"""Write the generated benchmark clusters (256 to 4096 GPUs, 4 to 32 pools) as cluster YAML files.

Usage: python -m mosearch.bench.gen_clusters OUT_DIR
`mosearch bench planners` generates them itself into a temporary folder; this script is for
inspecting or planning on them by hand (`mosearch plan --cluster OUT_DIR/gen-4096-p32.yaml ...`).
"""

import sys
from pathlib import Path

from mosearch.bench.scale import write_clusters

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for name, path in write_clusters(Path(sys.argv[1])).items():
        print(f"{name}: {path}")
