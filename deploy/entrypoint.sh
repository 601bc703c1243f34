#!/bin/sh
# The image's entrypoint: secrets given as files (Compose or Kubernetes secrets) become the
# variables the processes read, then the command takes this shell's place.
#   PGPASSWORD_FILE         -> PGPASSWORD (libpq's, for the store's PostgreSQL)
#   DURABLE_NB_SECRET_FILE  -> DURABLE_NB_SECRET (the key that signs stored values: one for all servers)
# Bearer tokens need nothing here: `durable-nb serve --tokens FILE` reads their file itself.
set -eu
for name in PGPASSWORD DURABLE_NB_SECRET; do
    eval "file=\${${name}_FILE:-}"
    if [ -n "$file" ]; then
        if [ ! -r "$file" ]; then
            echo "durable-nb-entrypoint: cannot read ${name}_FILE=$file; mount the secret there or unset ${name}_FILE." >&2
            exit 78
        fi
        value=$(cat "$file")
        if [ -z "$value" ]; then
            echo "durable-nb-entrypoint: ${name}_FILE=$file is empty; write the secret into it." >&2
            exit 78
        fi
        export "$name=$value"
        unset "${name}_FILE"
    fi
done
exec "$@"
