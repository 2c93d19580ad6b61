#!/usr/bin/env bash
# A sinkscope survey as a Slurm job array: one shard per array task, then a merge job that starts
# only when every task has succeeded (--dependency=afterok on the array).
#
#   bash docs/cluster/survey-slurm.sh     # on the login node: submits the array and the merge
#
# Edit N (and the --array range below to match), MODELS, SETTINGS and the paths. $PARTS and $OUT
# must be on a file system every node sees (the merge reads every task's directory).
#SBATCH --job-name=sinkscope-survey
#SBATCH --array=1-4
#SBATCH --cpus-per-task=8
#SBATCH --mem=32G
#SBATCH --time=04:00:00
#SBATCH --output=survey-%A_%a.log

set -euo pipefail

N=4                                                # shards: the same number as --array=1-N
PARTS=${PARTS:-$HOME/sinkscope/survey-parts}       # one directory per task below this
OUT=${OUT:-$HOME/sinkscope/survey}                 # the merged survey
MODELS=(-m /models/SmolLM2-135M-Instruct.Q4_1.gguf -m /models/gemma-3-270m -m /models/Qwen2.5-0.5B -m /models/OLMo-2-1B)
SETTINGS=(--cache 128,256 --tokens 1024)           # the same for every shard (a -f TEXT: the same path)

if [[ -n "${SLURM_ARRAY_TASK_ID:-}" ]]; then
    # An array task: shard K of N, resumable (a requeued task continues where it stopped).
    exec sinkscope survey "${MODELS[@]}" "${SETTINGS[@]}" \
        --shard "${SLURM_ARRAY_TASK_ID}/${N}" -o "$PARTS/part-$SLURM_ARRAY_TASK_ID"
fi

# By hand: submit the array, then the merge, which refuses (exit 2, nothing written) unless every
# shard's part is there and all are parts of one survey.
array=$(sbatch --parsable --array="1-$N" "$0")
dirs=""
for k in $(seq 1 "$N"); do dirs+=" $PARTS/part-$k"; done
merge=$(sbatch --parsable --dependency="afterok:${array}" --job-name=sinkscope-survey-merge \
    --cpus-per-task=2 --mem=8G --time=00:30:00 --output=survey-merge-%j.log \
    --wrap="sinkscope survey --merge${dirs} -o $OUT")
echo "submitted shards ${array} (1-$N) and merge ${merge} into $OUT"
