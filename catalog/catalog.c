/* placeholder: being written */
#include "mf_catalog.h"
