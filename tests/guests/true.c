/*
 * true - does nothing and succeeds: the cheapest possible process.
 *
 * Expected: no output, exit status 0.
 */
int main(void)
{
    return 0;
}
