#!/usr/bin/env bash
# Let Kafka's Java client read batches written by our encoder:
#   verify.sh <dir>
# For every <name>.bin in <dir> with a sibling <name>.expected.dump, Kafka
# decodes the bin (CRC-checked) and the canonical dump is compared with the
# expected text. Exit status 0 = all ok, 1 = any mismatch / decode failure /
# no cases found, 2 = usage error.
set -euo pipefail
if [ $# -ne 1 ]; then
    echo "usage: $0 <dir>" >&2
    exit 2
fi
dir="$(cd "$1" && pwd)"
cd "$(dirname "${BASH_SOURCE[0]}")"
if [ ! -f lib/.complete ]; then
    rm -rf lib
    if ! out="$(mvn -q -B dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=lib 2>&1)"; then
        echo "$out" >&2
        echo "$0: mvn dependency:copy-dependencies failed" >&2
        exit 1
    fi
    touch lib/.complete
fi
exec java -cp 'lib/*' GoldenBatches.java verify "$dir"
