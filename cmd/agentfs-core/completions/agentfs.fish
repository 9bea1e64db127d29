# fish completion for agentfs (agentfs completion fish prints it).
# Load it with:  agentfs completion fish | source
# or install it: agentfs completion fish > ~/.config/fish/completions/agentfs.fish
# The candidates come from `agentfs __complete WORDS...` (see agentfs help completion).

function __agentfs_complete
    set -l words (commandline -opc)
    set -l cur (commandline -ct)
    set -l lines ($words[1] __complete $words[2..-1] $cur 2>/dev/null)
    for line in $lines
        switch $line
            case :dirs
                __fish_complete_directories $cur
            case :files
                __fish_complete_path $cur
            case :commands
                __fish_complete_command $cur
            case '*'
                printf '%s\n' $line
        end
    end
end

complete -c agentfs -f -a '(__agentfs_complete)'
