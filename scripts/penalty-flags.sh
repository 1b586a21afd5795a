# scripts/penalty-flags.sh — sourced by the penalty scripts: penalty_flags SETTING prints the sampler options of one
# setting, one per line ("plain" → none; "repeat=1.1,last=-1" → --repeat-penalty 1.1 --repeat-last-n -1). Keys:
# repeat= frequency= presence= last= (llama.cpp's penalties) and DRY's dry= drybase= dryallowed= drylast=.
penalty_flags() {
    local kv x
    [ "$1" = plain ] && return 0
    IFS=',' read -ra kv <<< "$1"
    for x in "${kv[@]}"; do
        case ${x%%=*} in
            repeat) printf '%s\n' --repeat-penalty "${x#*=}" ;;
            frequency) printf '%s\n' --frequency-penalty "${x#*=}" ;;
            presence) printf '%s\n' --presence-penalty "${x#*=}" ;;
            last) printf '%s\n' --repeat-last-n "${x#*=}" ;;
            dry) printf '%s\n' --dry-multiplier "${x#*=}" ;;
            drybase) printf '%s\n' --dry-base "${x#*=}" ;;
            dryallowed) printf '%s\n' --dry-allowed-length "${x#*=}" ;;
            drylast) printf '%s\n' --dry-penalty-last-n "${x#*=}" ;;
            *) echo "unknown penalty setting '$x' (repeat= frequency= presence= last= dry= drybase= dryallowed= drylast=)" >&2
               return 1 ;;
        esac
    done
}
