/* placeholder: being written */
#include "mf_snapshot.h"
