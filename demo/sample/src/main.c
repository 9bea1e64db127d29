void greet(const char *who);
int main(void) { greet("world"); return 0; }
