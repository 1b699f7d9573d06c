# atoll_thread_entry(struct __pthread *self): where every thread but a
# process's first starts (pthread_create passes it to atoll.thread_spawn,
# which calls it through the function table). It points the C stack
# pointer at the thread's stack, which C cannot do, then runs the thread in
# C. A thread with a stack of the default size takes it here, the last
# spare one (pthread_create made sure there is one; see thread.c): so
# threads that run one after another use the same stack, whose pages are
# already there. When the thread is rewound after a stop, Asyncify skips
# straight back into the call.

	.globaltype	__stack_pointer, i32
	.functype	__atoll_thread_start (i32) -> ()

	.text
	.globl	atoll_thread_entry
	.type	atoll_thread_entry,@function
atoll_thread_entry:
	.functype	atoll_thread_entry (i32) -> ()
	.local	i32
	local.get	0
	i32.load	0                       # self->stack_top
	local.tee	1
	i32.eqz
	if
	i32.const	__atoll_stacks
	i32.const	__atoll_stacks
	i32.load	4
	i32.const	1
	i32.sub
	local.tee	1
	i32.store	4                       # stacks.count -= 1
	i32.const	__atoll_stacks
	i32.load	0
	local.get	1
	i32.const	2
	i32.shl
	i32.add
	i32.load	0
	local.set	1                       # s = stacks.spare[stacks.count]
	local.get	0
	local.get	1
	i32.store	4                       # self->stack = s
	local.get	1
	i32.const	__atoll_stacks
	i32.load	8
	i32.add
	local.set	1                       # its top: s + stacks.size
	end_if
	local.get	1
	global.set	__stack_pointer
	local.get	0
	call	__atoll_thread_start
	end_function
