#!/usr/bin/env bash
# Regenerate the golden Kafka record batches in wire/testdata/golden/ using
# Apache Kafka's own Java client code (see README.md).
set -euo pipefail
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
exec java -cp 'lib/*' GoldenBatches.java generate ../../wire/testdata/golden
