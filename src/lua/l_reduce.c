/* l_reduce.c - bindings of the reduce op family (filled in by its issue work). */
#include "lbind.h"

void dlL_open_reduce(lua_State *L) { (void)L; }
