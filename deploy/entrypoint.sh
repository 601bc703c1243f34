#!/bin/sh
# The image's entrypoint: the store's password, given as a file (a Compose or Kubernetes secret),
# becomes the variable libpq reads, then the command takes this shell's place.
#   PGPASSWORD_FILE -> PGPASSWORD (libpq's, for the store's PostgreSQL)
# durable_nb reads its own secret files: DURABLE_NB_SECRET_FILE (the key that signs stored values,
# one for all servers) and `durable-nb serve --tokens FILE` (bearer tokens), so neither travels in
# the environment of the notebooks' kernels.
set -eu
for name in PGPASSWORD; do
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
