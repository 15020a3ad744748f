// SPDX-License-Identifier: MIT
// TEST DOUBLE of the EFA kernel module, written for gpuprov's lab (tests/lab/efa). It carries
// the module name (efa) and the description ParallelCluster's test checks with `modinfo efa`
// ("Elastic Fabric Adapter", tests/recorded/reference/fabric.yaml efa.installer.installs),
// drives no device and is never loaded into a kernel by the lab (gpusim simulates the load).
#include <linux/init.h>
#include <linux/module.h>

static int __init efa_test_double_init(void)
{
	pr_info("efa: gpuprov lab test double @MODULE_VERSION@ (drives no device)\n");
	return 0;
}

static void __exit efa_test_double_exit(void)
{
}

module_init(efa_test_double_init);
module_exit(efa_test_double_exit);
MODULE_LICENSE("Dual BSD/GPL");
MODULE_VERSION("@MODULE_VERSION@");
MODULE_DESCRIPTION("@DESCRIPTION@ (gpuprov lab TEST DOUBLE)");
