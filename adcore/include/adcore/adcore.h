// adcore: the instrumented reference AD engine (umbrella header).
#pragma once
#include "adcore/device.h"
#include "adcore/dtype.h"
#include "adcore/engine.h"
#include "adcore/npy.h"
#include "adcore/ops.h"
#include "adcore/optim.h"
#include "adcore/options.h"
#include "adcore/registry.h"
#include "adcore/storage.h"
#include "adcore/tensor.h"
