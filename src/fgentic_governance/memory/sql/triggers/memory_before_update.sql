-- requires: functions/memory_before_update
DROP TRIGGER IF EXISTS memory_before_update ON fgentic_memory.memory;
CREATE TRIGGER memory_before_update BEFORE UPDATE ON fgentic_memory.memory
    FOR EACH ROW EXECUTE FUNCTION fgentic_memory.memory_before_update();
