# Sourced by hack/patroni.sh and hack/kagent-runtime.sh: one way to build a cached venv.
# cached_venv NAME KEY PYTHON LABEL builds, idempotently, the venv
# ${XDG_CACHE_HOME:-~/.cache}/fgentic-governance/NAME/KEY with PYTHON, calling the caller's
# venv_install VENV and venv_check VENV. Keyed by what it installs, so a changed pin builds a
# new venv; built in place and marked .complete last, so a half-built venv (an install that
# cannot start included) is removed and rebuilt. Prints the venv path as its last line.
cached_venv() {
  local name=$1 key=$2 python=$3 label=$4
  local cache="${XDG_CACHE_HOME:-$HOME/.cache}/fgentic-governance/$name"
  local venv="$cache/$key"
  mkdir -p "$cache"
  exec 9>"$cache/.lock"
  flock -w 900 9 || { echo "timed out waiting for another build ($cache/.lock)" >&2; return 1; }
  if [[ ! -f $venv/.complete ]]; then
    echo "== $label venv at $venv" >&2
    rm -rf "$venv"
    "$python" -m venv "$venv"
    venv_install "$venv" >&2
    venv_check "$venv" >&2
    touch "$venv/.complete"
  fi
  echo "$venv"
}
