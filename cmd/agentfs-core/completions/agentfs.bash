# bash completion for agentfs (agentfs completion bash prints it).
# Load it with:  source <(agentfs completion bash)
# or install it: agentfs completion bash > ~/.local/share/bash-completion/completions/agentfs
# The candidates come from `agentfs __complete WORDS...` (see agentfs help completion).

_agentfs() {
    local cur words cword
    if declare -F _init_completion >/dev/null 2>&1; then
        _init_completion -n =: || return
    else
        cur=${COMP_WORDS[COMP_CWORD]}
        words=("${COMP_WORDS[@]}")
        cword=$COMP_CWORD
    fi
    local IFS=$'\n'
    local -a lines
    lines=($("${words[0]}" __complete "${words[@]:1:cword-1}" "$cur" 2>/dev/null))
    COMPREPLY=()
    local line directive=
    for line in "${lines[@]}"; do
        case $line in
        :dirs | :files | :commands) directive=$line ;;
        *) COMPREPLY+=("${line%%$'\t'*}") ;;
        esac
    done
    case $directive in
    :dirs) COMPREPLY+=($(compgen -d -- "$cur")) ;;
    :files) COMPREPLY+=($(compgen -f -- "$cur")) ;;
    :commands) COMPREPLY+=($(compgen -c -- "$cur")) ;;
    esac
    if [[ -n $directive && $directive != :commands ]]; then
        compopt -o filenames 2>/dev/null
    fi
}
complete -F _agentfs agentfs
