"""cupric's own declarations of the OptiX 9.0 host API (ABI 105), for users without the SDK.

The OptiX SDK headers are not on PyPI under a license that allows shipping them, so
these declarations were written for cupric from the public OptiX API reference: the
result codes, the enums and option structs a host program fills, and the function
table in the order the driver's ``optixQueryFunctionTable`` fills it for ABI 105.

Structs that cupric does not fill yet (build inputs, relocation and emit descriptions,
denoiser, micromap, cluster and cooperative-vector descriptions) are declared opaque: the table still gets the right signatures, since OptiX takes all of
them by pointer, and a program that has the SDK gets their full layout from its
headers (`OPTIX_ROOT`), which `cupric.optix.lib` prefers when present.
"""

from __future__ import annotations

# The ABI this table layout belongs to, and the OptiX release that introduced it.
ABI_VERSION = 105
OPTIX_VERSION = 90000

_TYPES = """
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;

typedef enum OptixResult {
    OPTIX_SUCCESS = 0,
    OPTIX_ERROR_INVALID_VALUE = 7001,
    OPTIX_ERROR_HOST_OUT_OF_MEMORY = 7002,
    OPTIX_ERROR_INVALID_OPERATION = 7003,
    OPTIX_ERROR_FILE_IO_ERROR = 7004,
    OPTIX_ERROR_INVALID_FILE_FORMAT = 7005,
    OPTIX_ERROR_DISK_CACHE_INVALID_PATH = 7010,
    OPTIX_ERROR_DISK_CACHE_PERMISSION_ERROR = 7011,
    OPTIX_ERROR_DISK_CACHE_DATABASE_ERROR = 7012,
    OPTIX_ERROR_DISK_CACHE_INVALID_DATA = 7013,
    OPTIX_ERROR_LAUNCH_FAILURE = 7050,
    OPTIX_ERROR_INVALID_DEVICE_CONTEXT = 7051,
    OPTIX_ERROR_CUDA_NOT_INITIALIZED = 7052,
    OPTIX_ERROR_VALIDATION_FAILURE = 7053,
    OPTIX_ERROR_INVALID_INPUT = 7200,
    OPTIX_ERROR_INVALID_LAUNCH_PARAMETER = 7201,
    OPTIX_ERROR_INVALID_PAYLOAD_ACCESS = 7202,
    OPTIX_ERROR_INVALID_ATTRIBUTE_ACCESS = 7203,
    OPTIX_ERROR_INVALID_FUNCTION_USE = 7204,
    OPTIX_ERROR_INVALID_FUNCTION_ARGUMENTS = 7205,
    OPTIX_ERROR_PIPELINE_OUT_OF_CONSTANT_MEMORY = 7250,
    OPTIX_ERROR_PIPELINE_LINK_ERROR = 7251,
    OPTIX_ERROR_ILLEGAL_DURING_TASK_EXECUTE = 7270,
    OPTIX_ERROR_INTERNAL_COMPILER_ERROR = 7299,
    OPTIX_ERROR_DENOISER_MODEL_NOT_SET = 7300,
    OPTIX_ERROR_DENOISER_NOT_INITIALIZED = 7301,
    OPTIX_ERROR_NOT_COMPATIBLE = 7400,
    OPTIX_ERROR_PAYLOAD_TYPE_MISMATCH = 7500,
    OPTIX_ERROR_PAYLOAD_TYPE_RESOLUTION_FAILED = 7501,
    OPTIX_ERROR_PAYLOAD_TYPE_ID_INVALID = 7502,
    OPTIX_ERROR_NOT_SUPPORTED = 7800,
    OPTIX_ERROR_UNSUPPORTED_ABI_VERSION = 7801,
    OPTIX_ERROR_FUNCTION_TABLE_SIZE_MISMATCH = 7802,
    OPTIX_ERROR_INVALID_ENTRY_FUNCTION_OPTIONS = 7803,
    OPTIX_ERROR_LIBRARY_NOT_FOUND = 7804,
    OPTIX_ERROR_ENTRY_SYMBOL_NOT_FOUND = 7805,
    OPTIX_ERROR_LIBRARY_UNLOAD_FAILURE = 7806,
    OPTIX_ERROR_DEVICE_OUT_OF_MEMORY = 7807,
    OPTIX_ERROR_INVALID_POINTER = 7808,
    OPTIX_ERROR_CUDA_ERROR = 7900,
    OPTIX_ERROR_INTERNAL_ERROR = 7990,
    OPTIX_ERROR_UNKNOWN = 7999
} OptixResult;

typedef enum OptixDeviceProperty {
    OPTIX_DEVICE_PROPERTY_LIMIT_MAX_TRACE_DEPTH = 0x2001,
    OPTIX_DEVICE_PROPERTY_LIMIT_MAX_TRAVERSABLE_GRAPH_DEPTH = 0x2002,
    OPTIX_DEVICE_PROPERTY_LIMIT_MAX_PRIMITIVES_PER_GAS = 0x2003,
    OPTIX_DEVICE_PROPERTY_LIMIT_MAX_INSTANCES_PER_IAS = 0x2004,
    OPTIX_DEVICE_PROPERTY_RTCORE_VERSION = 0x2005,
    OPTIX_DEVICE_PROPERTY_LIMIT_MAX_INSTANCE_ID = 0x2006,
    OPTIX_DEVICE_PROPERTY_LIMIT_NUM_BITS_INSTANCE_VISIBILITY_MASK = 0x2007,
    OPTIX_DEVICE_PROPERTY_LIMIT_MAX_SBT_RECORDS_PER_GAS = 0x2008,
    OPTIX_DEVICE_PROPERTY_LIMIT_MAX_SBT_OFFSET = 0x2009
} OptixDeviceProperty;

typedef enum OptixDeviceContextValidationMode {
    OPTIX_DEVICE_CONTEXT_VALIDATION_MODE_OFF = 0,
    OPTIX_DEVICE_CONTEXT_VALIDATION_MODE_ALL = 0xFFFFFFFF
} OptixDeviceContextValidationMode;

typedef enum OptixCompileOptimizationLevel {
    OPTIX_COMPILE_OPTIMIZATION_DEFAULT = 0,
    OPTIX_COMPILE_OPTIMIZATION_LEVEL_0 = 0x2340,
    OPTIX_COMPILE_OPTIMIZATION_LEVEL_1 = 0x2341,
    OPTIX_COMPILE_OPTIMIZATION_LEVEL_2 = 0x2342,
    OPTIX_COMPILE_OPTIMIZATION_LEVEL_3 = 0x2343
} OptixCompileOptimizationLevel;

typedef enum OptixCompileDebugLevel {
    OPTIX_COMPILE_DEBUG_LEVEL_DEFAULT = 0,
    OPTIX_COMPILE_DEBUG_LEVEL_NONE = 0x2350,
    OPTIX_COMPILE_DEBUG_LEVEL_MINIMAL = 0x2351,
    OPTIX_COMPILE_DEBUG_LEVEL_MODERATE = 0x2353,
    OPTIX_COMPILE_DEBUG_LEVEL_FULL = 0x2352
} OptixCompileDebugLevel;

typedef enum OptixProgramGroupKind {
    OPTIX_PROGRAM_GROUP_KIND_RAYGEN = 0x2421,
    OPTIX_PROGRAM_GROUP_KIND_MISS = 0x2422,
    OPTIX_PROGRAM_GROUP_KIND_EXCEPTION = 0x2423,
    OPTIX_PROGRAM_GROUP_KIND_HITGROUP = 0x2424,
    OPTIX_PROGRAM_GROUP_KIND_CALLABLES = 0x2425
} OptixProgramGroupKind;

typedef enum OptixBuildOperation {
    OPTIX_BUILD_OPERATION_BUILD = 0x2161,
    OPTIX_BUILD_OPERATION_UPDATE = 0x2162
} OptixBuildOperation;

typedef enum OptixQueryFunctionTableOptions {
    OPTIX_QUERY_FUNCTION_TABLE_OPTION_DUMMY = 0
} OptixQueryFunctionTableOptions;

typedef unsigned long long OptixTraversableHandle;
typedef struct OptixDeviceContext_t *OptixDeviceContext;
typedef struct OptixModule_t *OptixModule;
typedef struct OptixProgramGroup_t *OptixProgramGroup;
typedef struct OptixPipeline_t *OptixPipeline;
typedef struct OptixDenoiser_t *OptixDenoiser;
typedef struct OptixTask_t *OptixTask;

typedef void (*OptixLogCallback)(unsigned int level, const char *tag, const char *message,
                                 void *cbdata);

/* What optixDeviceContextCreate reads. */
typedef struct OptixDeviceContextOptions {
    OptixLogCallback logCallbackFunction;
    void *logCallbackData;
    int logCallbackLevel;
    OptixDeviceContextValidationMode validationMode;
} OptixDeviceContextOptions;

/* Per-program stack needs, as optixProgramGroupGetStackSize reports them. */
typedef struct OptixStackSizes {
    unsigned int cssRG;
    unsigned int cssMS;
    unsigned int cssCH;
    unsigned int cssAH;
    unsigned int cssIS;
    unsigned int cssCC;
    unsigned int dssDC;
} OptixStackSizes;

/* Device addresses and strides of the shader binding table records. */
typedef struct OptixShaderBindingTable {
    CUdeviceptr raygenRecord;
    CUdeviceptr exceptionRecord;
    CUdeviceptr missRecordBase;
    unsigned int missRecordStrideInBytes;
    unsigned int missRecordCount;
    CUdeviceptr hitgroupRecordBase;
    unsigned int hitgroupRecordStrideInBytes;
    unsigned int hitgroupRecordCount;
    CUdeviceptr callablesRecordBase;
    unsigned int callablesRecordStrideInBytes;
    unsigned int callablesRecordCount;
} OptixShaderBindingTable;

/* Sizes optixAccelComputeMemoryUsage returns. */
typedef struct OptixAccelBufferSizes {
    size_t outputSizeInBytes;
    size_t tempSizeInBytes;
    size_t tempUpdateSizeInBytes;
} OptixAccelBufferSizes;

typedef struct OptixMotionOptions {
    unsigned short numKeys;
    unsigned short flags;
    float timeBegin;
    float timeEnd;
} OptixMotionOptions;

typedef struct OptixAccelBuildOptions {
    unsigned int buildFlags;
    OptixBuildOperation operation;
    OptixMotionOptions motionOptions;
} OptixAccelBuildOptions;

typedef struct OptixPayloadType {
    unsigned int numPayloadValues;
    const unsigned int *payloadSemantics;
} OptixPayloadType;

typedef struct OptixModuleCompileBoundValueEntry {
    size_t pipelineParamOffsetInBytes;
    size_t sizeInBytes;
    const void *boundValuePtr;
    const char *annotation;
} OptixModuleCompileBoundValueEntry;

typedef struct OptixModuleCompileOptions {
    int maxRegisterCount;
    OptixCompileOptimizationLevel optLevel;
    OptixCompileDebugLevel debugLevel;
    const OptixModuleCompileBoundValueEntry *boundValues;
    unsigned int numBoundValues;
    unsigned int numPayloadTypes;
    const OptixPayloadType *payloadTypes;
} OptixModuleCompileOptions;

typedef struct OptixProgramGroupSingleModule {
    OptixModule module;
    const char *entryFunctionName;
} OptixProgramGroupSingleModule;

typedef struct OptixProgramGroupHitgroup {
    OptixModule moduleCH;
    const char *entryFunctionNameCH;
    OptixModule moduleAH;
    const char *entryFunctionNameAH;
    OptixModule moduleIS;
    const char *entryFunctionNameIS;
} OptixProgramGroupHitgroup;

typedef struct OptixProgramGroupCallables {
    OptixModule moduleDC;
    const char *entryFunctionNameDC;
    OptixModule moduleCC;
    const char *entryFunctionNameCC;
} OptixProgramGroupCallables;

typedef struct OptixProgramGroupDesc {
    OptixProgramGroupKind kind;
    unsigned int flags;
    union {
        OptixProgramGroupSingleModule raygen;
        OptixProgramGroupSingleModule miss;
        OptixProgramGroupSingleModule exception;
        OptixProgramGroupCallables callables;
        OptixProgramGroupHitgroup hitgroup;
    };
} OptixProgramGroupDesc;

typedef struct OptixProgramGroupOptions {
    const OptixPayloadType *payloadType;
} OptixProgramGroupOptions;

/* Shared by every module of a pipeline (OptiX 9.0 layout: allowClusteredGeometry is new). */
typedef struct OptixPipelineCompileOptions {
    int usesMotionBlur;
    unsigned int traversableGraphFlags;
    int numPayloadValues;
    int numAttributeValues;
    unsigned int exceptionFlags;
    const char *pipelineLaunchParamsVariableName;
    unsigned int usesPrimitiveTypeFlags;
    int allowOpacityMicromaps;
    int allowClusteredGeometry;
} OptixPipelineCompileOptions;

/* Since OptiX 8.0 only the trace depth (debugLevel moved to the module options). */
typedef struct OptixPipelineLinkOptions {
    unsigned int maxTraceDepth;
} OptixPipelineLinkOptions;

/* Opaque here (see the module docstring); full in the SDK headers. */
typedef struct OptixBuiltinISOptions OptixBuiltinISOptions;
typedef struct OptixBuildInput OptixBuildInput;
typedef struct OptixAccelEmitDesc OptixAccelEmitDesc;
typedef struct OptixRelocationInfo OptixRelocationInfo;
typedef struct OptixRelocateInput OptixRelocateInput;
typedef struct OptixOpacityMicromapArrayBuildInput OptixOpacityMicromapArrayBuildInput;
typedef struct OptixMicromapBufferSizes OptixMicromapBufferSizes;
typedef struct OptixMicromapBuffers OptixMicromapBuffers;
typedef struct OptixDisplacementMicromapArrayBuildInput OptixDisplacementMicromapArrayBuildInput;
typedef struct OptixClusterAccelBuildInput OptixClusterAccelBuildInput;
typedef struct OptixClusterAccelBuildModeDesc OptixClusterAccelBuildModeDesc;
typedef struct OptixNetworkDescription OptixNetworkDescription;
typedef struct OptixDenoiserOptions OptixDenoiserOptions;
typedef struct OptixDenoiserSizes OptixDenoiserSizes;
typedef struct OptixDenoiserParams OptixDenoiserParams;
typedef struct OptixDenoiserGuideLayer OptixDenoiserGuideLayer;
typedef struct OptixDenoiserLayer OptixDenoiserLayer;
typedef struct OptixImage2D OptixImage2D;
typedef int OptixModuleCompileState;
typedef int OptixTraversableType;
typedef int OptixDenoiserModelKind;
typedef int OptixClusterAccelBuildMode;
typedef int OptixCoopVecElemType;
typedef int OptixCoopVecMatrixLayout;
"""

# (name, return type, parameters) in table order for ABI 105. Parameter lists follow
# the API reference; each entry becomes one function-pointer member of the table.
FUNCTION_TABLE: tuple[tuple[str, str, str], ...] = (
    ("optixGetErrorName", "const char *", "OptixResult result"),
    ("optixGetErrorString", "const char *", "OptixResult result"),
    ("optixDeviceContextCreate", "OptixResult",
     "CUcontext fromContext, const OptixDeviceContextOptions *options, OptixDeviceContext *context"),
    ("optixDeviceContextDestroy", "OptixResult", "OptixDeviceContext context"),
    ("optixDeviceContextGetProperty", "OptixResult",
     "OptixDeviceContext context, OptixDeviceProperty property, void *value, size_t sizeInBytes"),
    ("optixDeviceContextSetLogCallback", "OptixResult",
     "OptixDeviceContext context, OptixLogCallback callbackFunction, void *callbackData, "
     "unsigned int callbackLevel"),
    ("optixDeviceContextSetCacheEnabled", "OptixResult", "OptixDeviceContext context, int enabled"),
    ("optixDeviceContextSetCacheLocation", "OptixResult",
     "OptixDeviceContext context, const char *location"),
    ("optixDeviceContextSetCacheDatabaseSizes", "OptixResult",
     "OptixDeviceContext context, size_t lowWaterMark, size_t highWaterMark"),
    ("optixDeviceContextGetCacheEnabled", "OptixResult", "OptixDeviceContext context, int *enabled"),
    ("optixDeviceContextGetCacheLocation", "OptixResult",
     "OptixDeviceContext context, char *location, size_t locationSize"),
    ("optixDeviceContextGetCacheDatabaseSizes", "OptixResult",
     "OptixDeviceContext context, size_t *lowWaterMark, size_t *highWaterMark"),
    ("optixModuleCreate", "OptixResult",
     "OptixDeviceContext context, const OptixModuleCompileOptions *moduleCompileOptions, "
     "const OptixPipelineCompileOptions *pipelineCompileOptions, const char *input, "
     "size_t inputSize, char *logString, size_t *logStringSize, OptixModule *module"),
    ("optixModuleCreateWithTasks", "OptixResult",
     "OptixDeviceContext context, const OptixModuleCompileOptions *moduleCompileOptions, "
     "const OptixPipelineCompileOptions *pipelineCompileOptions, const char *input, "
     "size_t inputSize, char *logString, size_t *logStringSize, OptixModule *module, "
     "OptixTask *firstTask"),
    ("optixModuleGetCompilationState", "OptixResult",
     "OptixModule module, OptixModuleCompileState *state"),
    ("optixModuleDestroy", "OptixResult", "OptixModule module"),
    ("optixBuiltinISModuleGet", "OptixResult",
     "OptixDeviceContext context, const OptixModuleCompileOptions *moduleCompileOptions, "
     "const OptixPipelineCompileOptions *pipelineCompileOptions, "
     "const OptixBuiltinISOptions *builtinISOptions, OptixModule *builtinModule"),
    ("optixTaskExecute", "OptixResult",
     "OptixTask task, OptixTask *additionalTasks, unsigned int maxNumAdditionalTasks, "
     "unsigned int *numAdditionalTasksCreated"),
    ("optixProgramGroupCreate", "OptixResult",
     "OptixDeviceContext context, const OptixProgramGroupDesc *programDescriptions, "
     "unsigned int numProgramGroups, const OptixProgramGroupOptions *options, "
     "char *logString, size_t *logStringSize, OptixProgramGroup *programGroups"),
    ("optixProgramGroupDestroy", "OptixResult", "OptixProgramGroup programGroup"),
    ("optixProgramGroupGetStackSize", "OptixResult",
     "OptixProgramGroup programGroup, OptixStackSizes *stackSizes, OptixPipeline pipeline"),
    ("optixPipelineCreate", "OptixResult",
     "OptixDeviceContext context, const OptixPipelineCompileOptions *pipelineCompileOptions, "
     "const OptixPipelineLinkOptions *pipelineLinkOptions, "
     "const OptixProgramGroup *programGroups, unsigned int numProgramGroups, "
     "char *logString, size_t *logStringSize, OptixPipeline *pipeline"),
    ("optixPipelineDestroy", "OptixResult", "OptixPipeline pipeline"),
    ("optixPipelineSetStackSize", "OptixResult",
     "OptixPipeline pipeline, unsigned int directCallableStackSizeFromTraversal, "
     "unsigned int directCallableStackSizeFromState, unsigned int continuationStackSize, "
     "unsigned int maxTraversableGraphDepth"),
    ("optixAccelComputeMemoryUsage", "OptixResult",
     "OptixDeviceContext context, const OptixAccelBuildOptions *accelOptions, "
     "const OptixBuildInput *buildInputs, unsigned int numBuildInputs, "
     "OptixAccelBufferSizes *bufferSizes"),
    ("optixAccelBuild", "OptixResult",
     "OptixDeviceContext context, CUstream stream, const OptixAccelBuildOptions *accelOptions, "
     "const OptixBuildInput *buildInputs, unsigned int numBuildInputs, CUdeviceptr tempBuffer, "
     "size_t tempBufferSizeInBytes, CUdeviceptr outputBuffer, size_t outputBufferSizeInBytes, "
     "OptixTraversableHandle *outputHandle, const OptixAccelEmitDesc *emittedProperties, "
     "unsigned int numEmittedProperties"),
    ("optixAccelGetRelocationInfo", "OptixResult",
     "OptixDeviceContext context, OptixTraversableHandle handle, OptixRelocationInfo *info"),
    ("optixCheckRelocationCompatibility", "OptixResult",
     "OptixDeviceContext context, const OptixRelocationInfo *info, int *compatible"),
    ("optixAccelRelocate", "OptixResult",
     "OptixDeviceContext context, CUstream stream, const OptixRelocationInfo *info, "
     "const OptixRelocateInput *relocateInputs, size_t numRelocateInputs, "
     "CUdeviceptr targetAccel, size_t targetAccelSizeInBytes, OptixTraversableHandle *targetHandle"),
    ("optixAccelCompact", "OptixResult",
     "OptixDeviceContext context, CUstream stream, OptixTraversableHandle inputHandle, "
     "CUdeviceptr outputBuffer, size_t outputBufferSizeInBytes, OptixTraversableHandle *outputHandle"),
    ("optixAccelEmitProperty", "OptixResult",
     "OptixDeviceContext context, CUstream stream, OptixTraversableHandle handle, "
     "const OptixAccelEmitDesc *emittedProperty"),
    ("optixConvertPointerToTraversableHandle", "OptixResult",
     "OptixDeviceContext onDevice, CUdeviceptr pointer, OptixTraversableType traversableType, "
     "OptixTraversableHandle *traversableHandle"),
    ("optixOpacityMicromapArrayComputeMemoryUsage", "OptixResult",
     "OptixDeviceContext context, const OptixOpacityMicromapArrayBuildInput *buildInput, "
     "OptixMicromapBufferSizes *bufferSizes"),
    ("optixOpacityMicromapArrayBuild", "OptixResult",
     "OptixDeviceContext context, CUstream stream, "
     "const OptixOpacityMicromapArrayBuildInput *buildInput, const OptixMicromapBuffers *buffers"),
    ("optixOpacityMicromapArrayGetRelocationInfo", "OptixResult",
     "OptixDeviceContext context, CUdeviceptr opacityMicromapArray, OptixRelocationInfo *info"),
    ("optixOpacityMicromapArrayRelocate", "OptixResult",
     "OptixDeviceContext context, CUstream stream, const OptixRelocationInfo *info, "
     "CUdeviceptr targetOpacityMicromapArray, size_t targetOpacityMicromapArraySizeInBytes"),
    ("optixDisplacementMicromapArrayComputeMemoryUsage", "OptixResult",
     "OptixDeviceContext context, const OptixDisplacementMicromapArrayBuildInput *buildInput, "
     "OptixMicromapBufferSizes *bufferSizes"),
    ("optixDisplacementMicromapArrayBuild", "OptixResult",
     "OptixDeviceContext context, CUstream stream, "
     "const OptixDisplacementMicromapArrayBuildInput *buildInput, const OptixMicromapBuffers *buffers"),
    ("optixClusterAccelComputeMemoryUsage", "OptixResult",
     "OptixDeviceContext context, OptixClusterAccelBuildMode buildMode, "
     "const OptixClusterAccelBuildInput *buildInput, OptixAccelBufferSizes *bufferSizes"),
    ("optixClusterAccelBuild", "OptixResult",
     "OptixDeviceContext context, CUstream stream, "
     "const OptixClusterAccelBuildModeDesc *buildModeDesc, "
     "const OptixClusterAccelBuildInput *buildInput, CUdeviceptr argsArray, "
     "CUdeviceptr argsCount, unsigned int argsStrideInBytes"),
    ("optixSbtRecordPackHeader", "OptixResult",
     "OptixProgramGroup programGroup, void *sbtRecordHeaderHostPointer"),
    ("optixLaunch", "OptixResult",
     "OptixPipeline pipeline, CUstream stream, CUdeviceptr pipelineParams, "
     "size_t pipelineParamsSize, const OptixShaderBindingTable *sbt, unsigned int width, "
     "unsigned int height, unsigned int depth"),
    ("optixCoopVecMatrixConvert", "OptixResult",
     "OptixDeviceContext context, CUstream stream, unsigned int numNetworks, "
     "const OptixNetworkDescription *inputNetworkDescription, CUdeviceptr inputNetworks, "
     "size_t inputNetworkStrideInBytes, const OptixNetworkDescription *outputNetworkDescription, "
     "CUdeviceptr outputNetworks, size_t outputNetworkStrideInBytes"),
    ("optixCoopVecMatrixComputeSize", "OptixResult",
     "OptixDeviceContext context, unsigned int N, unsigned int K, "
     "OptixCoopVecElemType elementType, OptixCoopVecMatrixLayout layout, "
     "size_t rowColumnStrideInBytes, size_t *sizeInBytes"),
    ("optixDenoiserCreate", "OptixResult",
     "OptixDeviceContext context, OptixDenoiserModelKind modelKind, "
     "const OptixDenoiserOptions *options, OptixDenoiser *returnHandle"),
    ("optixDenoiserDestroy", "OptixResult", "OptixDenoiser handle"),
    ("optixDenoiserComputeMemoryResources", "OptixResult",
     "const OptixDenoiser handle, unsigned int maximumInputWidth, "
     "unsigned int maximumInputHeight, OptixDenoiserSizes *returnSizes"),
    ("optixDenoiserSetup", "OptixResult",
     "OptixDenoiser denoiser, CUstream stream, unsigned int inputWidth, unsigned int inputHeight, "
     "CUdeviceptr denoiserState, size_t denoiserStateSizeInBytes, CUdeviceptr scratch, "
     "size_t scratchSizeInBytes"),
    ("optixDenoiserInvoke", "OptixResult",
     "OptixDenoiser denoiser, CUstream stream, const OptixDenoiserParams *params, "
     "CUdeviceptr denoiserState, size_t denoiserStateSizeInBytes, "
     "const OptixDenoiserGuideLayer *guideLayer, const OptixDenoiserLayer *layers, "
     "unsigned int numLayers, unsigned int inputOffsetX, unsigned int inputOffsetY, "
     "CUdeviceptr scratch, size_t scratchSizeInBytes"),
    ("optixDenoiserComputeIntensity", "OptixResult",
     "OptixDenoiser handle, CUstream stream, const OptixImage2D *inputImage, "
     "CUdeviceptr outputIntensity, CUdeviceptr scratch, size_t scratchSizeInBytes"),
    ("optixDenoiserComputeAverageColor", "OptixResult",
     "OptixDenoiser handle, CUstream stream, const OptixImage2D *inputImage, "
     "CUdeviceptr outputAverageColor, CUdeviceptr scratch, size_t scratchSizeInBytes"),
    ("optixDenoiserCreateWithUserModel", "OptixResult",
     "OptixDeviceContext context, const void *userData, size_t userDataSizeInBytes, "
     "OptixDenoiser *returnHandle"),
)

# The driver's one exported entry point.
_QUERY = (
    "OptixResult optixQueryFunctionTable(int abiId, unsigned int numOptions, "
    "OptixQueryFunctionTableOptions *optionKeys, const void **optionValues, "
    "void *functionTable, size_t sizeOfTable);"
)


def function_table_declaration() -> str:
    """C text of ``OptixFunctionTable``: one function pointer per entry, in table order."""
    members = "".join(
        f"    {ret} (*{name})({params});\n" for name, ret, params in FUNCTION_TABLE
    )
    return f"typedef struct OptixFunctionTable {{\n{members}}} OptixFunctionTable;\n"


def cdef() -> str:
    """All declarations, ready for ``ffi.cdef``."""
    return _TYPES + function_table_declaration() + _QUERY + "\n"


# Short descriptions of the result codes, paraphrasing the API reference; used when the
# function table (and with it optixGetErrorString) is not loaded.
RESULT_DESCRIPTIONS = {
    "OPTIX_SUCCESS": "no error",
    "OPTIX_ERROR_INVALID_VALUE": "an argument has an invalid value",
    "OPTIX_ERROR_HOST_OUT_OF_MEMORY": "host memory allocation failed",
    "OPTIX_ERROR_INVALID_OPERATION": "the operation is not valid in this state",
    "OPTIX_ERROR_FILE_IO_ERROR": "a file could not be read or written",
    "OPTIX_ERROR_INVALID_FILE_FORMAT": "a file has an invalid format",
    "OPTIX_ERROR_DISK_CACHE_INVALID_PATH": "the disk cache path is invalid",
    "OPTIX_ERROR_DISK_CACHE_PERMISSION_ERROR": "no permission to use the disk cache location",
    "OPTIX_ERROR_DISK_CACHE_DATABASE_ERROR": "the disk cache database failed",
    "OPTIX_ERROR_DISK_CACHE_INVALID_DATA": "the disk cache holds invalid data",
    "OPTIX_ERROR_LAUNCH_FAILURE": "a launch failed",
    "OPTIX_ERROR_INVALID_DEVICE_CONTEXT": "the device context is invalid",
    "OPTIX_ERROR_CUDA_NOT_INITIALIZED": "CUDA is not initialized (no current CUDA context)",
    "OPTIX_ERROR_VALIDATION_FAILURE": "validation mode found an error",
    "OPTIX_ERROR_INVALID_INPUT": "the module input (PTX or OptiX IR) is invalid",
    "OPTIX_ERROR_INVALID_LAUNCH_PARAMETER": "the launch parameter is invalid",
    "OPTIX_ERROR_INVALID_PAYLOAD_ACCESS": "a program accesses the payload invalidly",
    "OPTIX_ERROR_INVALID_ATTRIBUTE_ACCESS": "a program accesses attributes invalidly",
    "OPTIX_ERROR_INVALID_FUNCTION_USE": "a device function is used where it is not allowed",
    "OPTIX_ERROR_INVALID_FUNCTION_ARGUMENTS": "a device function got invalid arguments",
    "OPTIX_ERROR_PIPELINE_OUT_OF_CONSTANT_MEMORY": "the pipeline needs more constant memory than exists",
    "OPTIX_ERROR_PIPELINE_LINK_ERROR": "linking the pipeline failed",
    "OPTIX_ERROR_ILLEGAL_DURING_TASK_EXECUTE": "the call is not allowed while a task executes",
    "OPTIX_ERROR_INTERNAL_COMPILER_ERROR": "the OptiX compiler failed internally",
    "OPTIX_ERROR_DENOISER_MODEL_NOT_SET": "the denoiser has no model",
    "OPTIX_ERROR_DENOISER_NOT_INITIALIZED": "the denoiser is not set up",
    "OPTIX_ERROR_NOT_COMPATIBLE": "the data is not compatible with this device or driver",
    "OPTIX_ERROR_PAYLOAD_TYPE_MISMATCH": "payload types do not match",
    "OPTIX_ERROR_PAYLOAD_TYPE_RESOLUTION_FAILED": "the payload type could not be resolved",
    "OPTIX_ERROR_PAYLOAD_TYPE_ID_INVALID": "the payload type id is invalid",
    "OPTIX_ERROR_NOT_SUPPORTED": "the feature is not supported",
    "OPTIX_ERROR_UNSUPPORTED_ABI_VERSION": "the driver does not support this OptiX ABI version",
    "OPTIX_ERROR_FUNCTION_TABLE_SIZE_MISMATCH": "the function table size does not match the ABI",
    "OPTIX_ERROR_INVALID_ENTRY_FUNCTION_OPTIONS": "invalid options for the entry function",
    "OPTIX_ERROR_LIBRARY_NOT_FOUND": "the OptiX library was not found",
    "OPTIX_ERROR_ENTRY_SYMBOL_NOT_FOUND": "the OptiX entry symbol was not found",
    "OPTIX_ERROR_LIBRARY_UNLOAD_FAILURE": "unloading the OptiX library failed",
    "OPTIX_ERROR_DEVICE_OUT_OF_MEMORY": "device memory allocation failed",
    "OPTIX_ERROR_INVALID_POINTER": "a pointer argument is invalid",
    "OPTIX_ERROR_CUDA_ERROR": "a CUDA call inside OptiX failed",
    "OPTIX_ERROR_INTERNAL_ERROR": "an internal OptiX error",
    "OPTIX_ERROR_UNKNOWN": "an unknown error",
}
