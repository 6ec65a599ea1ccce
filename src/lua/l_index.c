/* l_index.c - bindings of the index op family (filled in by its issue work). */
#include "lbind.h"

void dlL_open_index(lua_State *L) { (void)L; }
