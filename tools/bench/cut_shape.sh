# shellcheck shell=bash
# Sourced by cache_speed.sh and storage_step_speed.sh: the real shapes they cut, with their real widths.
#
#   cut_shape_facts FAMILY        sets cut (the transformer config's new block counts, JSON), cut_name and described;
#                                 returns 1 for an unknown family
#   write_cut_shape ROOT SHAPE    writes ROOT/configs/models/$family-shape with the cut into SHAPE (replaced), links
#                                 followed (its tokenizers are links into tests/data)
#
# The weights dpinfer_bench writes for a shape are stamped with its path, so each family's cut lives at one path
# (the model folder's, plus .shape) that both scripts share.

cut_shape_facts() {
  case "$1" in
    flux-dev) cut='{"num_layers": 2, "num_single_layers": 4}'; cut_name=L2S4; described="FLUX.1-dev cut to 2 + 4 blocks" ;;
    qwen-image) cut='{"num_layers": 6}'; cut_name=L6; described="Qwen-Image cut to 6 of 60 blocks" ;;
    *) return 1 ;;
  esac
  family="$1"
}

write_cut_shape() {
  rm -rf "$2"
  cp -rL "$1/configs/models/$family-shape" "$2"
  python3 - "$2/transformer/config.json" "$cut" <<'PY'
import json, sys
p = sys.argv[1]
c = json.load(open(p))
c.update(json.loads(sys.argv[2]))
json.dump(c, open(p, "w"), indent=2)
PY
}
