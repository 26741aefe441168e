#!/usr/bin/env bash
# Whether a job may hold refbench's cache key (refbench/trust.py): only when every ref it builds is
# merged code, i.e. reachable from the default branch or from a release tag (v*) of the checkout.
# A job that builds anything else (a PR number, a PR's branch, a commit of a fork) runs code no
# maintainer merged, and that code could read the key and forge seals, whatever the job's event.
#
#   scripts/key-gate.sh CHECKOUT DEFAULT_BRANCH [REF...]
#
# The checkout itself must be merged code too: the job runs its refbench.toml (whose steps are shell
# commands) and, in bench-sharded.yml, its bench.py, beside the key. A checkout whose HEAD is not
# reachable from the default branch or a release tag (a push to, or a dispatch from, an unmerged
# branch) exits 3, one line on stdout saying so: the job builds merged refs, but gets no key.
#
# Exit 0: every ref is merged; stdout is one line, the refs to give refbench in their order, each
# as the whole 40-hex commit it names here, in the checkout, but latest_release (a release tag by
# definition). refbench in a keyed run takes no prefix (it would resolve it in its cached clone,
# which a restored cache may have filled with a commit of the same prefix), and a branch or tag
# passed as a name could be pushed to between this check and refbench's own fetch. Exit 1, with
# one line on stdout saying why not: any other case, including a ref that cannot be found, an unknown default branch, a shallow checkout (where
# reachability cannot be told) or no refs at all (the default: a PR's base and head).
# Used by action.yml (step "Decide whether this job may hold the cache key") and bench-sharded.yml.
set -uo pipefail
repo=$1 default=$2
shift 2
no() { echo "$*"; exit 1; }
g() { git -C "$repo" -c core.hooksPath=/dev/null -c core.fsmonitor=false "$@"; }
[[ $# -gt 0 ]] || no "no refs given: the default builds a pull request's head"
[[ "$(g rev-parse --is-shallow-repository 2>/dev/null)" == "false" ]] ||
  no "$repo is a shallow checkout or none (checkout with fetch-depth: 0 to tell merged code)"
if [[ -z "$default" ]]; then
  default=$(g symbolic-ref -q --short refs/remotes/origin/HEAD 2>/dev/null) && default=${default#origin/}
fi
[[ -n "$default" ]] || no "the default branch is not known"
base=$(g rev-parse -q --verify "refs/remotes/origin/$default^{commit}" 2>/dev/null ||
       g rev-parse -q --verify "refs/heads/$default^{commit}" 2>/dev/null) || no "no branch $default in $repo"
merged() { g merge-base --is-ancestor "$1" "$base" 2>/dev/null ||
           [[ -n "$(g tag --list 'v[0-9]*' --contains "$1" 2>/dev/null | head -n 1)" ]]; }
out=()
for ref in "$@"; do
  [[ "$ref" =~ ^#?[0-9]{1,6}$ ]] && no "$ref is a pull request"
  # never an option to refbench or git (a tag refs/tags/--variant=pr=1234 is a valid refname)
  [[ "$ref" == -* ]] && no "$ref starts with '-': not a ref refbench takes"
  [[ "$ref" == "latest_release" ]] && { out+=("$ref"); continue; }  # a release tag by definition
  sha=""
  case "$ref" in
    HEAD) sha=$(g rev-parse -q --verify "HEAD^{commit}") ;;  # what the checkout holds
    # a whole id is the commit first, as in refbench's refs.resolve (and git): never a branch or
    # tag named by those 40 hex digits, which refbench would not build
    *) { [[ "$ref" =~ ^([0-9a-fA-F]{40}|[0-9a-fA-F]{64})$ ]] && sha=$(g rev-parse -q --verify "$ref^{commit}" 2>/dev/null); } ||
       sha=$(g rev-parse -q --verify "refs/tags/$ref^{commit}" 2>/dev/null ||
             g rev-parse -q --verify "refs/remotes/origin/$ref^{commit}" 2>/dev/null) ||
       { [[ "$ref" =~ ^[0-9a-fA-F]{7,40}$ ]] && sha=$(g rev-parse -q --verify "$ref^{commit}" 2>/dev/null); } ;;
  esac
  [[ -n "$sha" ]] || no "$ref is not a tag, branch or commit of $repo"
  if merged "$sha"; then
    out+=("$sha")
    continue
  fi
  no "$ref (${sha:0:12}) is not reachable from $default or a release tag"
done
head=$(g rev-parse -q --verify "HEAD^{commit}" 2>/dev/null) || no "$repo has no HEAD"
merged "$head" || { echo "the checkout's HEAD (${head:0:12}) is not reachable from $default or a release tag: its refbench.toml would run beside the key"; exit 3; }
echo "${out[*]}"
exit 0
