// placeholder until the program lands
int main() { return 1; }
