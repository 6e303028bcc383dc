# Sourced by the experiments that train and then play a match: the match must read the run that training wrote,
# so the extra flags' --experiment and --train_dir (if given) name it for both. Sets EXPERIMENT and TRAIN_DIR from
# the defaults given as $1 and $2 and from the flags after them.
EXPERIMENT=$1 TRAIN_DIR=$2
shift 2
while (($#)); do
  case $1 in
    --experiment) EXPERIMENT=$2 ;;
    --experiment=*) EXPERIMENT=${1#*=} ;;
    --train_dir) TRAIN_DIR=$2 ;;
    --train_dir=*) TRAIN_DIR=${1#*=} ;;
  esac
  shift
done
