// SPDX-License-Identifier: MIT
// TEST DOUBLE of NVIDIA's kernel module, written for gpuprov's lab (tests/lab/aptrepo). It
// registers under NVIDIA's module name and carries the driver's version and licence in its
// .modinfo, which is all the GPU simulator reads (tests/lab/gpusim, "Driver detection"). It
// drives no GPU, creates no device node and is never loaded into a kernel by the lab.
#include <linux/init.h>
#include <linux/module.h>

static int __init nvidia_test_double_init(void)
{
	pr_info("nvidia: gpuprov lab test double @VERSION@ (drives no GPU)\n");
	return 0;
}

static void __exit nvidia_test_double_exit(void)
{
}

module_init(nvidia_test_double_init);
module_exit(nvidia_test_double_exit);
MODULE_LICENSE("@LICENSE@");
MODULE_VERSION("@VERSION@");
MODULE_DESCRIPTION("gpuprov lab TEST DOUBLE of the NVIDIA kernel module (@FLAVOUR@)");
