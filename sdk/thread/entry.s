# atoll_thread_entry(struct __pthread *self): where every thread but a
# process's first starts (pthread_create passes it to atoll.thread_spawn,
# which calls it through the function table). It points the C stack
# pointer at the thread's own stack, which C cannot do, then runs the
# thread in C. When the thread is rewound after a stop, Asyncify skips
# straight back into the call.

	.globaltype	__stack_pointer, i32
	.functype	__atoll_thread_start (i32) -> ()

	.text
	.globl	atoll_thread_entry
	.type	atoll_thread_entry,@function
atoll_thread_entry:
	.functype	atoll_thread_entry (i32) -> ()
	local.get	0
	i32.load	0
	global.set	__stack_pointer
	local.get	0
	call	__atoll_thread_start
	end_function
