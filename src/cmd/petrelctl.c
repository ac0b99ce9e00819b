/* petrelctl: the operator CLI. Everything lives in src/ctl/. */
int ctl_main(int argc, char **argv);

int main(int argc, char **argv)
{
    return ctl_main(argc, argv);
}
