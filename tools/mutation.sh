#!/usr/bin/env bash
# Mutation testing of the modules whose bugs would be silent (a wrong limit, a wrong
# placement, a wrong fold), with mutmut 3. Outside CI: it takes minutes per module.
#
#   pip install -e '.[mutation]'
#   bash tools/mutation.sh                 # every module below, one after another
#   bash tools/mutation.sh launch fold     # some of them
#
# Each module runs in its own copy of the working tree (mutmut writes mutants/ beside
# the sources), niced, with only the targeted test files that cover it, and at most
# MUT_CAP seconds (default 1200). Results: $MUT_OUT/<module>/ (default scratch/mutation):
# results.txt (every mutant and its status), survivors.diff (the diff of each survivor),
# and one summary line per module on stdout and in $MUT_OUT/summary.md.
#
# Not mutated: the statements that raise an error or warn (do_not_mutate_patterns
# below). Mutating their message text gives mutants that still raise the same error
# type at the same place; the tests check the type and, where the words matter to the
# user, match the message.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${MUT_OUT:-$ROOT/scratch/mutation}
CAP=${MUT_CAP:-1200}
CHILDREN=${MUT_CHILDREN:-1}

# module | file to mutate | mutant-name globs (space separated; mutmut names a function
# f of module m `m.x_f__mutmut_N` and a method `m.xǁClassǁf__mutmut_N`) | test files
MODULES=(
"launch|cupric/runtime/launch.py|cupric.runtime.launch.x__normalize_type__* cupric.runtime.launch.x_param_layout__* cupric.runtime.launch.x_dim3__* cupric.runtime.launch.x_check_config__* cupric.runtime.launch.x_validate_launch__*|tests/runtime/test_boundaries_launch.py tests/runtime/test_core_launch.py tests/compiler/test_launch_checks.py"
"layout|cupric/runtime/memory.py|cupric.runtime.memory.x_normalize_shape__* cupric.runtime.memory.x_c_strides__* cupric.runtime.memory.x_is_c_contiguous__* cupric.runtime.memory.x_is_f_contiguous__* cupric.runtime.memory.x_extent__* cupric.runtime.memory.x_index_layout__* cupric.runtime.memory.x_reshape_layout__* cupric.runtime.memory.x_view_layout__* cupric.runtime.memory.x__exact_shape__* cupric.runtime.memory.x__layout__*|tests/runtime/test_memory_layout.py tests/runtime/test_boundaries_layout.py"
"const|cupric/compiler/lowering/const.py|cupric.compiler.lowering.const.*|tests/compiler/test_boundaries_const.py tests/compiler/test_constant_policy.py tests/compiler/test_device_lowering_io.py"
"fold|cupric/bindings_gen/fold.py|cupric.bindings_gen.fold.*|tests/bindings_gen/test_fold.py tests/bindings_gen/test_boundaries_fold.py"
"gpu_rand|cupric/gpu_rand/host.py cupric/gpu_rand/splitmix.py cupric/gpu_rand/gf2.py cupric/gpu_rand/streams.py|cupric.gpu_rand.host.* cupric.gpu_rand.splitmix.* cupric.gpu_rand.gf2.* cupric.gpu_rand.streams.*|tests/gpu_rand/test_reference.py tests/gpu_rand/test_jumps.py tests/gpu_rand/test_boundaries_engines.py"
"cublas|cupric/cublas/_validate.py|cupric.cublas._validate.*|tests/cublas/test_cublas_cpu.py tests/cublas/test_boundaries_validate.py"
# cudnn: the checks; not _borrow (array intake through the runtime and PyTorch's
# bfloat16 export, covered by tests/runtime and the GPU lane) nor new_output (allocation).
"cudnn|cupric/cudnn/_validate.py|cupric.cudnn._validate.x_element_type__* cupric.cudnn._validate.x_alloc_dtype__* cupric.cudnn._validate.x_packed_strides__* cupric.cudnn._validate.x__orders__* cupric.cudnn._validate.x__matches__* cupric.cudnn._validate.x_layout_of__* cupric.cudnn._validate.x_channels_last__* cupric.cudnn._validate.x_alignment_of__* cupric.cudnn._validate.x__describe__* cupric.cudnn._validate.x_tensor__* cupric.cudnn._validate.x_expect__* cupric.cudnn._validate.x_same_type__* cupric.cudnn._validate.x_output__* cupric.cudnn._validate.x_result__* cupric.cudnn._validate.x_check_overlap__* cupric.cudnn._validate.x_as_tuple__* cupric.cudnn._validate.x_conv_output_shape__* cupric.cudnn._validate.x_conv_input_shape__* cupric.cudnn._validate.x_check_conv_operands__* cupric.cudnn._validate.x_pool_output_shape__*|tests/cudnn/test_cudnn_cpu.py tests/cudnn/test_boundaries_validate.py"
)

toml_list() {  # words -> ["a", "b"]
    local out="" w
    for w in "$@"; do out+="${out:+, }\"$w\""; done
    printf '[%s]' "$out"
}

run_module() {
    local name=$1 file=$2 globs=$3 tests=$4
    local work=$OUT/$name/tree
    rm -rf "$OUT/$name" && mkdir -p "$work"
    # The tracked and untracked-but-not-ignored files, as `run` would see them.
    (cd "$ROOT" && git ls-files -co --exclude-standard | grep -v '^scratch/' | tar -cf - -T -) \
        | tar -xf - -C "$work"
    local existing=() t
    for t in $tests; do [[ -e $work/$t ]] && existing+=("$t"); done
    # shellcheck disable=SC2086
    cat >>"$work/pyproject.toml" <<EOF

[tool.mutmut]
source_paths = ["cupric"]
only_mutate = $(toml_list $file)
do_not_mutate_patterns = ["^\\\\s*raise ", "warnings\\\\.warn\\\\("]
pytest_add_cli_args_test_selection = $(toml_list "${existing[@]}")
pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "-x", "-m", "not gpu and not slow"]
# Each mutant's tests in a fresh worker forked from a server that only collected them:
# some CPU-lane tests (the cuBLAS emulator) assume a process that has not run them yet.
process_isolation = "forkserver"
EOF
    local start=$SECONDS rc
    # shellcheck disable=SC2086
    # A kernel cache of its own: mutants never write into the user's. Compiled code is
    # keyed by the (mutmut-rewritten, hence unchanging) compiler sources, so a test that
    # must see each mutant's code compiles with cache=False or inspects the IR.
    (cd "$work" && CUPRIC_CACHE_DIR="$OUT/$name/cache" timeout "$CAP" nice -n 10 python3 -m mutmut run --max-children "$CHILDREN" \
        $globs >"$OUT/$name/run.log" 2>&1)
    rc=$?
    (cd "$work" && python3 -m mutmut results --all true 2>/dev/null) >"$OUT/$name/results.txt"
    : >"$OUT/$name/survivors.diff"
    local m
    for m in $(awk -F': ' '$2 == "survived" || $2 == "no tests" {print $1}' "$OUT/$name/results.txt"); do
        (cd "$work" && python3 -m mutmut show "$m" 2>/dev/null) >>"$OUT/$name/survivors.diff"
    done
    python3 - "$name" "$OUT/$name/results.txt" "$rc" "$((SECONDS - start))" "${globs}" <<'PY' | tee -a "$OUT/summary.md"
import fnmatch, sys
name, path, rc, secs, globs = sys.argv[1:]
counts = {}
for line in open(path, encoding="utf-8"):
    mutant, _, status = line.strip().rpartition(": ")
    if not mutant or not any(fnmatch.fnmatch(mutant, g) for g in globs.split()):
        continue
    counts[status] = counts.get(status, 0) + 1
total = sum(counts.values())
killed = counts.get("killed", 0) + counts.get("timeout", 0)
pending = counts.get("not checked", 0)
note = " (cut at the time cap)" if rc in ("124", "137") else ""
score = f"{100 * killed / (total - pending):.1f} %" if total - pending else "n/a"
detail = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
print(f"| {name} | {total} | {killed} | {score} | {detail} | {secs} s{note} |")
PY
}

mkdir -p "$OUT"
wanted=("$@")
for entry in "${MODULES[@]}"; do
    IFS='|' read -r name file globs tests <<<"$entry"
    if ((${#wanted[@]})) && [[ ! " ${wanted[*]} " == *" $name "* ]]; then continue; fi
    run_module "$name" "$file" "$globs" "$tests"
done
