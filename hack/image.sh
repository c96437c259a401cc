#!/usr/bin/env bash
# Builds the container image without a daemon (mmdebstrap + umoci + skopeo, as root): the
# same image as `docker build -f Containerfile .`, whose ENTRYPOINT, USER, WORKDIR, ENV and
# LABELs it reads, so the two builds cannot disagree. The name comes from the chart's
# values.yaml (image.repository), the tag from Chart.yaml (appVersion). See docs/image.md.
#
#   tar=$(bash hack/image.sh | tail -1)     # the last line of stdout is image.tar's path
#
# Output: ${FGENTIC_IMAGE_DIR:-~/.cache/fgentic-governance/image}/<key>/ with oci/ (OCI
# layout), image.tar (docker-archive, for `docker load`, `kind load image-archive`,
# `ctr images import`), rootfs/ (the unpacked root filesystem) and summary.txt; `current`
# links to the newest. <key> hashes every input (the project's files, the Containerfile, this
# script, the Debian package list, name and tag): with the same inputs a run costs nothing.
# The Debian base is cached as a tarball keyed by the package list, so a code change only
# reruns the venv step. FGENTIC_IMAGE_REBUILD=1 rebuilds everything (newer Debian and PyPI
# packages: neither is pinned beyond the version ranges in pyproject.toml).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
exec 3>&1 1>&2  # stdout carries only the final path; everything else goes to stderr

die() { echo "image.sh: $*" >&2; exit 1; }
py="$root/.venv/bin/python"
[[ -x $py ]] || die "no .venv: run hack/bootstrap.sh first"
[[ $(id -u) -eq 0 ]] || die "must run as root (mmdebstrap --mode=root, chroot)"

need_apt=()
command -v mmdebstrap >/dev/null || need_apt+=(mmdebstrap)
command -v umoci >/dev/null || need_apt+=(umoci)
command -v skopeo >/dev/null || need_apt+=(skopeo)
command -v unshare >/dev/null || need_apt+=(util-linux)
command -v runc >/dev/null || need_apt+=(runc)  # not for the build: tests/image runs the image
if ((${#need_apt[@]})); then
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

# The Debian base: what goes into its key is exactly what makes it.
suite=bookworm
venv=/opt/fgentic-governance
# shellcheck disable=SC2054  # the commas are --include's
mmdebstrap_args=(
  --mode=root --variant=essential --include=python3,python3-venv
  # No Recommends (as apt-get --no-install-recommends in the Containerfile); merged /usr the
  # debootstrap way (usr-is-merged), not with the usrmerge package, which pulls in perl.
  --aptopt='APT::Install-Recommends "false"' --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*'
  "$suite"
)
mirrors=(
  "deb http://deb.debian.org/debian $suite main"
  "deb http://deb.debian.org/debian $suite-updates main"
  "deb http://deb.debian.org/debian-security $suite-security main"
)
base_key="$(printf '%s\n' "$(mmdebstrap --version)" "${mmdebstrap_args[@]}" "${mirrors[@]}" \
  | sha256sum | cut -c1-16)"

out_root="${FGENTIC_IMAGE_DIR:-$HOME/.cache/fgentic-governance/image}"
mkdir -p "$out_root/base"
# One build at a time (tests of several tiers may ask at once): the second waits, then finds
# the image cached.
exec 9>"$out_root/.lock"
flock 9
rm -rf "$out_root"/.build.*  # left by a build that was killed (the trap below never ran)
tmp="$(mktemp -d "$out_root/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

# One pass over the inputs: snapshot the project's files into $tmp/src (the wheel is built
# from exactly what is hashed, whatever else changes in the work tree meanwhile), read the
# name, tag and final-stage instructions, and print them as shell assignments.
name='' tag='' key='' config_args=()
meta="$("$py" - "$root" "$tmp/src" "$base_key" <<'PY'
import hashlib, json, re, shlex, shutil, subprocess, sys
from pathlib import Path

import yaml

root, src, base_key = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
inputs = ["src", "pyproject.toml", "README.md", "Containerfile",
          "hack/image.sh"]
try:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *inputs],
        cwd=root, check=True, capture_output=True).stdout.decode().split("\0")
except (OSError, subprocess.CalledProcessError):  # not a git checkout: every file
    listed = [str(p.relative_to(root)) for i in inputs for p in
              ([root / i] if (root / i).is_file() else (root / i).rglob("*"))]
files = sorted({f for f in listed if f and (root / f).is_file()
                and "__pycache__" not in Path(f).parts and not f.endswith(".pyc")})

chart = yaml.safe_load((root / "charts/fgentic-governance/Chart.yaml").read_text())
values = yaml.safe_load((root / "charts/fgentic-governance/values.yaml").read_text())
name, tag = values["image"]["repository"], str(chart["appVersion"])

digest = hashlib.sha256(f"{name}:{tag}\0{base_key}\0".encode())
for f in files:
    data = (root / f).read_bytes()
    (src / f).parent.mkdir(parents=True, exist_ok=True)
    (src / f).write_bytes(data)
    shutil.copymode(root / f, src / f)
    digest.update(f.encode() + b"\0" + hashlib.sha256(data).digest())

# The final stage of the Containerfile: continuation lines joined, comments dropped.
text = re.sub(r"\\\n", " ", (root / "Containerfile").read_text())
lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
stage = lines[max(i for i, ln in enumerate(lines) if ln.split()[0].upper() == "FROM") + 1:]

def expand(value: str) -> str:
    value = re.sub(r"\$\{VERSION\}|\$VERSION\b", tag, value)
    if "$" in value:
        sys.exit(f"image.sh: unsupported variable in the Containerfile: {value}")
    return value

config = []
seen = set()
for line in stage:
    op, _, rest = line.partition(" ")
    op = op.upper()
    seen.add(op)
    if op == "ENTRYPOINT":
        config += [f"--config.entrypoint={a}" for a in json.loads(rest)]
    elif op == "USER":
        config.append(f"--config.user={expand(rest.strip())}")
    elif op == "WORKDIR":
        config.append(f"--config.workingdir={expand(rest.strip())}")
    elif op in ("ENV", "LABEL"):
        flag = "--config.env" if op == "ENV" else "--config.label"
        for pair in shlex.split(rest):
            key, eq, value = pair.partition("=")
            if not eq:
                sys.exit(f"image.sh: write {op} as key=value pairs: {line}")
            config.append(f"{flag}={key}={expand(value)}")
            if op == "LABEL" and key.startswith("org.opencontainers.image."):
                config.append(f"--manifest.annotation={key}={expand(value)}")
missing = {"ENTRYPOINT", "USER"} - seen
if missing:
    sys.exit(f"image.sh: the Containerfile's final stage has no {', '.join(sorted(missing))}")

print(f"name={shlex.quote(name)} tag={shlex.quote(tag)} key={digest.hexdigest()[:16]}")
print("config_args=(" + " ".join(shlex.quote(a) for a in config) + ")")
PY
)"  # a failure stops the script here: `eval "$(false)"` would not
eval "$meta"
out="$out_root/$key"

if [[ -f $out/image.tar && -z ${FGENTIC_IMAGE_REBUILD:-} ]]; then
  echo "cached: $name:$tag in $out (FGENTIC_IMAGE_REBUILD=1 rebuilds)"
  cat "$out/summary.txt"
  ln -sfn "$key" "$out_root/current"
  echo "$out/image.tar" >&3
  exit 0
fi
start=$SECONDS

echo "== wheels of fgentic-governance and its runtime dependencies"
"$py" -m pip wheel --quiet --wheel-dir "$tmp/wheels" "$tmp/src"

base="$out_root/base/$base_key.tar"
if [[ ! -f $base || -n ${FGENTIC_IMAGE_REBUILD:-} ]]; then
  echo "== Debian $suite base (mmdebstrap: python3, python3-venv)"
  mmdebstrap --quiet "${mmdebstrap_args[@]}" "$tmp/base.tar" "${mirrors[@]}" \
    >"$tmp/mmdebstrap.log" 2>&1 || { cat "$tmp/mmdebstrap.log"; die "mmdebstrap failed"; }
  find "$out_root/base" -name '*.tar' -delete
  mv "$tmp/base.tar" "$base"
else
  echo "== Debian $suite base: cached ($base)"
fi

echo "== root filesystem: venv at $venv from the wheels"
rootfs="$tmp/rootfs"
mkdir "$rootfs"
tar -xpf "$base" -C "$rootfs" --numeric-owner
mkdir "$rootfs/tmp/wheels"
cp "$tmp/wheels"/*.whl "$rootfs/tmp/wheels/"
# A private mount namespace: /proc, /dev and /dev/shm (compileall -j) vanish with it, even on
# failure. env -i: nothing of the host's pip settings (PIP_FIND_LINKS, PIP_INDEX_URL, ...)
# leaks in, and the install never touches the network.
read -r -d '' in_chroot <<SH || true
set -eu
python3 -m venv $venv
$venv/bin/python -m pip install --quiet --no-compile --no-index --find-links /tmp/wheels \
  fgentic-governance
$venv/bin/python -m pip uninstall --quiet --yes pip setuptools
dpkg --purge python3-venv python3.11-venv python3-pip-whl python3-setuptools-whl >/dev/null
site=\$($venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
# The Kubernetes client's asyncio twin (about half the client): nothing we ship imports it.
if ! grep -rqE 'kubernetes[.]aio|from kubernetes import .*[^_]aio' \
    "\$site/fgentic_governance"; then
  rm -rf "\$site/kubernetes/aio"
fi
find $venv -name __pycache__ -prune -exec rm -rf {} +
$venv/bin/python -m compileall -q -j 0 $venv/lib
SH
# shellcheck disable=SC2016  # expanded by the inner shell
unshare --mount --propagation private -- sh -euc '
  r=$1; shift
  mount -t proc proc "$r/proc"
  mount --rbind /dev "$r/dev"
  mount -t tmpfs -o mode=1777 shm "$r/dev/shm"
  exec chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    /bin/sh -c "$1"' sh "$rootfs" "$in_chroot"

grep -q '^nonroot:' "$rootfs/etc/group" || echo 'nonroot:x:65532:' >>"$rootfs/etc/group"
grep -q '^nonroot:' "$rootfs/etc/passwd" \
  || echo 'nonroot:x:65532:65532::/home/nonroot:/usr/sbin/nologin' >>"$rootfs/etc/passwd"
install -d -m 0700 -o 65532 -g 65532 "$rootfs/home/nonroot"
# mmdebstrap copied the host's resolv.conf and hostname; the runtime mounts its own there.
for f in etc/resolv.conf etc/hostname; do : >"$rootfs/$f" && chmod 0644 "$rootfs/$f"; done
# Caches, logs, lists and device nodes (the runtime provides /dev): not part of an image.
(cd "${rootfs:?}" && rm -rf ./tmp/* ./var/tmp/* ./root/.cache ./var/log/* ./var/lib/apt/lists/* \
  ./var/cache/apt/* ./var/cache/debconf/*-old ./var/lib/dpkg/*-old ./dev/*)

echo "== OCI image $name:$tag (umoci)"
umoci init --layout "$tmp/oci"
umoci new --image "$tmp/oci:$tag"
umoci insert --image "$tmp/oci:$tag" --history.created_by "hack/image.sh" "$rootfs" /
umoci config --image "$tmp/oci:$tag" --no-history --clear=config.env --clear=config.cmd \
  --author fgentic-governance "${config_args[@]}"
umoci gc --layout "$tmp/oci"
skopeo --insecure-policy copy --quiet "oci:$tmp/oci:$tag" "docker-archive:$tmp/image.tar:$name:$tag"

# The summary: sizes and what is inside.
manifest="$("$py" - "$tmp/oci" "$tag" <<'PY'
import json, sys
from pathlib import Path

layout, tag = Path(sys.argv[1]), sys.argv[2]
def blob(digest: str) -> dict:
    return json.loads((layout / "blobs" / digest.replace(":", "/")).read_text())
desc = next(m for m in json.loads((layout / "index.json").read_text())["manifests"]
            if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag)
manifest = blob(desc["digest"])
config = blob(manifest["config"]["digest"])["config"]
print(sum(layer["size"] for layer in manifest["layers"]), config.get("User", ""),
      json.dumps(config.get("Entrypoint")))
PY
)"
read -r layer_bytes user entrypoint <<<"$manifest"
site="$rootfs$venv/lib/python3.11/site-packages"
human() { numfmt --to=iec --suffix=B "$1"; }
{
  echo "image:       $name:$tag  user $user  entrypoint $entrypoint"
  echo "python:      $(chroot "$rootfs" /usr/bin/python3 -V 2>&1) (Debian $suite," \
       "$(dpkg-query --admindir="$rootfs/var/lib/dpkg" -W | wc -l) packages)"
  echo "size:        rootfs $(human "$(du -sb "$rootfs" | cut -f1)")," \
       "compressed layer $(human "$layer_bytes"), image.tar $(human "$(stat -c %s "$tmp/image.tar")")"
  echo "top level:  $(cd "$rootfs" && du -sb -- * | sort -rn | head -6 \
       | while read -r n d; do printf ' %s %s' "$d" "$(human "$n")"; done)"
  echo "site-packages ($(human "$(du -sb "$site" | cut -f1)")), biggest:"
  (cd "$site" && du -sb -- */ | sort -rn | head -8 \
     | while read -r n d; do printf '  %-24s %s\n' "${d%/}" "$(human "$n")"; done)
} >"$tmp/summary.txt"

rm -rf "$tmp/src" "$tmp/wheels"
previous="$(readlink "$out_root/current" || true)"
rm -rf "$out"
mv "$tmp" "$out"
chmod 0755 "$out"
ln -sfn "$key" "$out_root/current"
# Keep this build and the one before it; older ones are only disk.
# Only directories named like a key, with our summary: others may share this directory.
for dir in "$out_root"/*/summary.txt; do
  dir="${dir%/summary.txt}"
  name_="${dir##*/}"
  if [[ $name_ =~ ^[0-9a-f]{16}$ && ! -L $dir && $name_ != "$key" && $name_ != "$previous" ]]
  then rm -rf "$dir"; fi
done
echo "== built in $((SECONDS - start)) s: $out"
cat "$out/summary.txt"
echo "$out/image.tar" >&3
