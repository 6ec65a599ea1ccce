/* l_linalg.c - bindings of the linalg op family (filled in by its issue work). */
#include "lbind.h"

void dlL_open_linalg(lua_State *L) { (void)L; }
