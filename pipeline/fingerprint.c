/* placeholder: being written */
#include "mf_pipeline.h"
