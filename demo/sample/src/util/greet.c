#include <stdio.h>
void greet(const char *who) { printf("hello, %s\n", who); }
