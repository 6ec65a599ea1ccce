/* l_print.c - bindings of the print op family (filled in by its issue work). */
#include "lbind.h"

void dlL_open_print(lua_State *L) { (void)L; }
