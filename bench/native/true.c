/*
 * true - the smallest native program: the target that spawn_native starts,
 * the native counterpart of tests/guests/true.c.
 */
int main(void)
{
    return 0;
}
