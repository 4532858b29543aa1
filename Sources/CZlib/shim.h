#ifndef MULTIPEER_CZLIB_SHIM_H
#define MULTIPEER_CZLIB_SHIM_H

#include <zlib.h>

#endif
