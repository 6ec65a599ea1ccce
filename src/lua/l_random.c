/* l_random.c - bindings of the random op family (filled in by its issue work). */
#include "lbind.h"

void dlL_open_random(lua_State *L) { (void)L; }
