/* l_elementwise.c - bindings of the elementwise op family (filled in by its issue work). */
#include "lbind.h"

void dlL_open_elementwise(lua_State *L) { (void)L; }
