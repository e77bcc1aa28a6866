# Sourced by the interop tests (imagefolder, CSV, WebP, benchmark layouts): sets $py to the project
# venv's python once it imports the given modules, the readers that tools/setup.sh installs from
# tools/readers-requirements.txt; otherwise the test fails (exit 1), saying how to get them. CI has
# them, so these tests run there rather than skip.
# Usage: . readers_python.sh; readers_python SOURCE_DIR module[,module...]
readers_python() {
  local root="$1" modules="$2"
  py="${DPINFER_VENV:-$root/.venv}/bin/python"
  if ! "$py" -c "import $modules" 2>/dev/null; then
    echo "no $modules in the project venv ${py%/bin/python}: run tools/setup.sh, which installs tools/readers-requirements.txt"
    exit 1
  fi
}
